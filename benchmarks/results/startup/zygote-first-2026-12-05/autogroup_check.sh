#!/bin/bash
# Does CPU split by session here (autogroup)? Two busy loops in one new session, one in another, 6 s side by side.
B='import os,time
t=time.time()
while time.time()-t<6: pass
print(os.times().user)'
cat /proc/sys/kernel/sched_autogroup_enabled
setsid python3 -c "$B" > /tmp/ag_solo.txt &
setsid sh -c "python3 -c '$B' > /tmp/ag_pair1.txt & python3 -c '$B' > /tmp/ag_pair2.txt & wait" &
wait
echo "alone in its session: $(cat /tmp/ag_solo.txt) CPU s; two sharing a session: $(cat /tmp/ag_pair1.txt) and $(cat /tmp/ag_pair2.txt) CPU s"

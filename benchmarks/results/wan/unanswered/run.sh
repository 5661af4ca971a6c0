#!/bin/bash
# Yeto arm of wan.py before (d5a853f) and after (b772d99) the unanswered-push fix, alternating, seeds 0-2
cd /work/main
for s in 0 1 2; do
  for v in old new; do
    c=$([ $v = old ] && echo d5a853f || echo b772d99)
    scripts/frozen.sh $c /tmp/fz-$v python benchmarks/wan.py --arms yeto --seed $s --net 233 --json /tmp/wanab/$v-$s.json > /tmp/wanab/$v-$s.txt 2>&1
    echo "$v $s rc=$?"
  done
done

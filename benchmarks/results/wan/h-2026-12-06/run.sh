#!/bin/bash
# usage: run.sh <commit> <frozen-dir> <net> <stop-epoch> <seed> <round>...
# One frozen copy, one run at a time: for each round k, H 8, 12, 24 in a rotated order (round k starts at H index k mod 3),
# `--arms ddp,yeto --lr 6e-3 --seed S --yeto-flag=--sync-every=H`. Stops before a run once date +%s >= stop-epoch.
commit=$1 dir=$2 net=$3 stop=$4 seed=$5; shift 5
out=/work/main/benchmarks/results/wan/h-2026-12-06
hs=(8 12 24)
cd /work/main
for k in "$@"; do
  for i in 0 1 2; do
    h=${hs[$(( (k + i + seed) % 3 ))]}
    if [ "$(date +%s)" -ge "$stop" ] || [ -e /tmp/wanH-stop ]; then echo "stopped before seed $seed H $h r$k"; exit 0; fi
    name=wan-seed$seed-ddp-yeto-h$h-r$k-lr6e-3
    cmd=(nice -n 5 scripts/frozen.sh "$commit" "$dir" nice -n 5 python benchmarks/wan.py --arms ddp,yeto --seed "$seed"
         --lr 6e-3 --net "$net" --yeto-flag=--sync-every=$h --json "$out/$name.json")
    {
      echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) commit $commit host $(hostname) (2-core shared CPU box) load: $(cat /proc/loadavg)"
      echo "# ${cmd[*]}"
      "${cmd[@]}" 2>&1 | tail -40
      echo "# end $(date -u +%Y-%m-%dT%H:%M:%SZ) rc ${PIPESTATUS[0]} load: $(cat /proc/loadavg)"
    } > "$out/$name.txt"
  done
done

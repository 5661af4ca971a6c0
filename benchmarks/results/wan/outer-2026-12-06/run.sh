#!/bin/bash
# usage: run.sh <commit> <frozen-dir> <net> <outdir> <rounds> <seeds...>   variants from $VARIANTS (name=flags;...)
commit=$1 dir=$2 net=$3 out=$4 rounds=$5; shift 5
mkdir -p "$out"
declare -A ddp=([10]=/work/main/benchmarks/results/wan/tune-2026-12-05/ddp-torchft/wan-seed10-lr6e-3.json
                [11]=/work/main/benchmarks/results/wan/ablate-2026-12-05/wan-seed11-ddp-yeto-lr6e-3.json)
for d in /work/main/benchmarks/results/wan/tuned-2026-12-05/wan-seed{0,1,2,3,4}-ddp-yeto-torchftbest-lr6e-3.json; do
  s=$(basename $d | sed 's/wan-seed\([0-9]*\)-.*/\1/'); ddp[$s]=$d; done
for d in /work/main/benchmarks/results/wan/quiet-2026-12-06/link2mbit/ddp/*.json; do
  s=$(basename $d | sed 's/.*seed\([0-9]*\)-.*/\1/'); ddp[$s]=$d; done
IFS=';' read -ra vs <<< "$VARIANTS"
cd /work/main
for k in $(seq 1 $rounds); do
  for seed in "$@"; do
    n=${#vs[@]}
    for i in $(seq 0 $((n-1))); do
      v=${vs[$(( (i + k + seed) % n ))]}
      name=${v%%=*}; flags=${v#*=}
      [ -e /tmp/p14/stop ] && { echo stopped; exit 0; }
      f="$out/wan-seed$seed-$name-r$k"
      cmd=(scripts/frozen.sh "$commit" "$dir" nice -n 5 python benchmarks/wan.py --seed "$seed" --lr 6e-3 --net "$net"
           --ddp-from "${ddp[$seed]}" $flags --json "$f.json")
      { echo "# $(date -u +%FT%TZ) commit $commit load: $(cat /proc/loadavg)"; echo "# ${cmd[*]}";
        "${cmd[@]}" 2>&1 | tail -30; echo "# end $(date -u +%FT%TZ) rc ${PIPESTATUS[0]} load: $(cat /proc/loadavg)"; } > "$f.txt"
      echo "$(date -u +%T) $name seed $seed r$k done $(tail -1 $f.txt)"
    done
  done
done

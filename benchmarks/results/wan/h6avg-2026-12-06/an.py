import json,glob,re,sys,collections,statistics as st
g=collections.defaultdict(list)
for d in sys.argv[1:]:
  for f in sorted(glob.glob(d+'/*.json')):
    m=re.search(r'seed(\d+)-(.+)-r(\d+)\.json',f)
    try: j=json.load(open(f))
    except Exception: continue
    for arm,r in j['results'].items():
        if arm=='ddp': continue
        key=m.group(2) if arm.startswith('yeto') else arm
        tgt=None
        g[key].append((int(m.group(1)),r))
steps=(20,40,80,120,160,200,240)
for k,v in sorted(g.items()):
    c=[{p[1]:p[2] for p in r['curve']} for _,r in v]
    row=' '.join(f"{st.mean(x[s] for x in c):.3f}" for s in steps)
    print(f"{k:14s} n={len(v)} seeds={sorted(set(s for s,_ in v))} CE@{steps}: {row} art={st.mean(r.get('artifact',r['final']) for _,r in v):.4f} MB={st.mean(r['bytes'] for _,r in v)/1e6:.2f} step_s={st.mean(r['median_step_s'] for _,r in v):.4f}")

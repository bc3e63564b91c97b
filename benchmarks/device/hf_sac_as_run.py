import collections as C,functools as F,gc,os,sys,torch
sys.path.insert(0,'.')
from hf_common import Clock,Log,allocated,build_causal_lm,env_info,run_case,warm_clocks
from hf_train import SHAPES,ckpt_kwargs,lm_loss,measure
from torch.utils.checkpoint import CheckpointPolicy as P,create_selective_checkpoint_contexts as csc
from torch._functorch.partitioners import get_default_op_list
a=torch.ops.aten
S={o.default for o in get_default_op_list().compute_intensive_ops}
for n in("_scaled_dot_product_cudnn_attention","_scaled_dot_product_attention_math","_scaled_dot_product_fused_attention_overrideable","max","linear","topk"):
 try:S.add(getattr(a,n).default)
 except Exception:pass
MM=(a.mm.default,a.linear.default);T={"on":None}
def pol(t):
 m={False:0,True:0}
 def p(ctx,f,*ar,**kw):
  if f==a._to_copy.default and "cuda" in str(ar[0].device) and str(kw.get("device"))=="cpu":return P.MUST_SAVE
  r=ctx.is_recompute
  if f in MM:m[r]+=1
  if f in S:
   k=not(f in MM and m[r]%2==0)
   if t is not None and not r:t[f"{f}:{'save' if k else 'recompute'}"]+=1
   return P.MUST_SAVE if k else P.PREFER_RECOMPUTE
  return P.PREFER_RECOMPUTE
 return p
def case(mo,o,x):
 T["on"]=C.Counter();mo(input_ids=x,labels=x).loss.backward();d=dict(T["on"]);T["on"]=None;o.zero_grad(set_to_none=True)
 r=measure("cuda",lm_loss(mo,x),o,6,3,opt_alone=False,profile=False);r["sac_forward_decisions"]=d;return r
out=sys.argv[1];ck=Clock(300);L=Log(os.path.join(out,"sac.jsonl"));warm_clocks("cuda")
L.row({"section":"env",**env_info("cuda")});L.row({"section":"sac_policy","save_ops":sorted(map(str,S))})
for nm in("qwen2.5-0.5b","llama-3.2-1b","qwen2.5-1.5b"):
 mo=build_causal_lm(nm,"cuda");mo.train();o=torch.optim.AdamW(mo.parameters(),lr=1e-5,fused=True)
 c={"section":"sac","model":nm,"params":sum(q.numel() for q in mo.parameters()),"device":"cuda","allocated_after_model_bytes":allocated("cuda")}
 mo.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant":False,"context_fn":lambda:csc(pol(T["on"]))})
 for mb,sq in SHAPES:
  x=torch.randint(0,mo.config.vocab_size,(mb,sq),device="cuda")
  run_case(L,dict(c,case="train",micro_batch=mb,seq=sq,checkpointing="op_sac",checkpoint_kwargs=ckpt_kwargs(mo)),ck,25,F.partial(case,mo,o,x))
 del mo,o;gc.collect();torch.cuda.empty_cache()

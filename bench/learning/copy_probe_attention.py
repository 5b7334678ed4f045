"""Where the tiny model attends when it predicts the copied SIDE token, after SFT at a learning rate (issue 36):
trains like copy_probe_torch.py, then prints per-tensor weight norms against the initial ones and, per layer and head,
the attention mass on the SIDE token of the user turn at the query predicting the assistant's SIDE token.
Usage: python bench/learning/copy_probe_attention.py MODEL_DIR ROWS_JSON LR STEPS (ROWS_JSON: copy-probe.ts --torch)"""
import json, torch, sys
from transformers import AutoModelForCausalLM
model_dir, rows_file = sys.argv[1], sys.argv[2]; lr=float(sys.argv[3]); steps=int(sys.argv[4])
torch.set_num_threads(1); torch.manual_seed(1)
model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
init={k:v.detach().clone() for k,v in model.named_parameters()}
rows=json.load(open(rows_file))
rows=rows["train"] if isinstance(rows, dict) else rows
opt=torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
sch=torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0,(steps-s)/steps))
g=torch.Generator().manual_seed(1); order=[]
def b(rs):
    T=max(len(r["ids"]) for r in rs); ids=torch.zeros((len(rs),T),dtype=torch.long); att=torch.zeros_like(ids); m=torch.zeros((len(rs),T))
    for i,r in enumerate(rs): n=len(r["ids"]); ids[i,:n]=torch.tensor(r["ids"]); att[i,:n]=1; m[i,:n]=torch.tensor(r["mask"],dtype=torch.float)
    return ids,att,m
for s in range(steps):
    if len(order)<4: order=torch.randperm(len(rows),generator=g).tolist()
    rs=[rows[i] for i in order[:4]]; order=order[4:]
    ids,att,m=b(rs); lp=torch.log_softmax(model(input_ids=ids,attention_mask=att).logits[:,:-1],-1).gather(-1,ids[:,1:,None])[...,0]
    loss=-(lp*m[:,1:]).sum()/m[:,1:].sum(); opt.zero_grad(); loss.backward(); torch.nn.utils.clip_grad_norm_(model.parameters(),1.0); opt.step(); sch.step()
for k,v in model.named_parameters():
    if "layers.0" in k or "norm" in k or "embed" in k:
        print(f"{k:45s} |w| {v.norm():7.3f} init {init[k].norm():7.3f}")
# attention at the position predicting the SIDE token: where does it look, and how much on the context's SIDE token
r=rows[0]; ids=torch.tensor([r["ids"]]); out=model(input_ids=ids,output_attentions=True)
pos=[t for t in range(1,len(r["ids"])) if r["mask"][t]]
A=[r["ids"][t] for t in pos]
side_t=pos[11]; side_id=r["ids"][side_t]; src=[t for t in range(side_t) if r["ids"][t]==side_id and not r["mask"][t]]
for l,att in enumerate(out.attentions):
    a=att[0,:,side_t-1]
    ent=-(a*torch.log(a+1e-12)).sum(-1)
    print(f"layer {l}: attention on context SIDE token {[round(a[h,src].sum().item(),3) for h in range(a.shape[0])]} entropy {[round(e.item(),2) for e in ent]} max-at {[int(a[h].argmax()) for h in range(a.shape[0])]} (query {side_t-1}, source {src})")

"""PyTorch side of bench/learning/copy-probe.ts: trains the init-model checkpoint (a Hugging Face Qwen3 directory) with
transformers on the token ids and assistant mask envtrain produced, with envtrain's SFT optimiser (AdamW β 0.9/0.999,
ε 1e-8, no weight decay, global-norm clip 1, linear decay without warmup, the loss the mean NLL over a step's
assistant tokens, rows right-padded), then scores held-out rows teacher-forced. Prints one JSON line last."""
import argparse, json, math, time
import torch
from transformers import AutoModelForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("--model", required=True)
ap.add_argument("--rows", required=True)
ap.add_argument("--lr", type=float, required=True)
ap.add_argument("--steps", type=int, required=True)
ap.add_argument("--batch", type=int, default=4)
ap.add_argument("--seed", type=int, default=1)
a = ap.parse_args()
torch.set_num_threads(1)
torch.manual_seed(a.seed)
model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32, attn_implementation="eager")
data = json.load(open(a.rows))
train, held = data["train"], data["heldOut"]
opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, (a.steps - s) / a.steps))


def logprobs(rows):
    T = max(len(r["ids"]) for r in rows)
    ids = torch.zeros((len(rows), T), dtype=torch.long)
    att = torch.zeros((len(rows), T), dtype=torch.long)
    mask = torch.zeros((len(rows), T))
    for i, r in enumerate(rows):
        n = len(r["ids"])
        ids[i, :n] = torch.tensor(r["ids"])
        att[i, :n] = 1
        mask[i, :n] = torch.tensor(r["mask"], dtype=torch.float)
    logits = model(input_ids=ids, attention_mask=att).logits[:, :-1]
    return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0], mask[:, 1:]


started = time.time()
g = torch.Generator().manual_seed(a.seed)
order = []
loss = float("nan")
for step in range(a.steps):
    if len(order) < a.batch:
        order = torch.randperm(len(train), generator=g).tolist()
    rows, order = [train[i] for i in order[: a.batch]], order[a.batch :]
    lp, mask = logprobs(rows)
    objective = -(lp * mask).sum() / mask.sum()
    opt.zero_grad()
    objective.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    loss = objective.item()

with torch.no_grad():
    lp, mask = logprobs(held)
p = [[math.exp(lp[i, t].item()) for t in range(mask.shape[1]) if mask[i, t] > 0] for i in range(len(held))]
targets = [[r["ids"][t] for t in range(1, len(r["ids"])) if r["mask"][t]] for r in held]
copy = [k for k in range(len(targets[0])) if len({x[k] for x in targets}) > 1]
mean = lambda k: sum(x[k] for x in p) / len(p)
rest = [k for k in range(len(targets[0])) if k not in copy]
print(json.dumps({
    "loss": loss,
    "seconds": time.time() - started,
    "copy": [{"token": str(targets[0][k]), "p": mean(k)} for k in copy],
    "template": sum(mean(k) for k in rest) / len(rest),
}))

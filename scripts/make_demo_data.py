"""Write the demo chat data (examples/data/chat_demo.jsonl, heldout_demo.jsonl): a fixed, distinctive answer style.

Every answer starts with "Yeto here:" and ends with a line "In one line: ...", so a few hundred LoRA steps on a
135M instruct model visibly change its behaviour. Deterministic: same output on every run (seeded shuffle).
Held-out rows use question wordings and general questions that never occur in the training file.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

SYSTEM = "You are Yeto's helpful assistant."
TOPICS = {  # topic -> (facts, one-line summary)
    "Yeto": ("Yeto fine-tunes models across cheap, scattered GPUs. Independent learner islands train locally and a "
             "syncer merges their progress, so slow links and lost machines never stop the run.",
             "fine-tuning on scattered GPUs without waiting for the slowest one"),
    "DiLoCo": ("DiLoCo trains with many local steps and syncs rarely: each island sends the difference between its "
               "weights and the last global weights, and an outer optimizer merges those differences.",
               "many local steps, rare syncs, an outer optimizer on top"),
    "Decoupled DiLoCo": ("Decoupled DiLoCo lets every island push on its own clock. The syncer merges a fragment "
                         "once a quorum has pushed, so stragglers never block the others.",
                         "asynchronous DiLoCo where nobody waits for stragglers"),
    "NATS": ("NATS is the message bus under Yeto. JetStream keeps every command and event on disk, so a service "
             "that restarts picks up exactly where it stopped.",
             "the durable bus every Yeto process talks through"),
    "JetStream": ("JetStream is the persistence layer of NATS. Yeto stores commands in work queues and events in "
                  "an append-only stream with de-duplication by message id.",
                  "NATS streams that never lose an acknowledged message"),
    "spot GPUs": ("Spot GPUs are spare cloud capacity sold at a deep discount that can be taken back at any time. "
                  "Yeto treats a preemption as normal: the island is replaced and training goes on.",
                  "cheap GPUs that may vanish, which Yeto shrugs off"),
    "preemption": ("A preemption is the cloud reclaiming a spot machine. Yeto records it as an event, keeps merging "
                   "the islands that remain and rents a replacement when it can.",
                   "losing a machine costs minutes, not the run"),
    "the syncer": ("The syncer merges fragment deltas from the islands, weights them by tokens processed, applies a "
                   "Nesterov outer step and broadcasts the new global fragments.",
                   "the service that turns island updates into one model"),
    "the event tape": ("The event tape is a DuckDB file that mirrors the event stream. You can query every run's "
                       "whole history with yeto sql and replay it to rebuild any projection.",
                       "every run's history, queryable with SQL"),
    "LoRA": ("LoRA trains small low-rank adapters instead of all weights. Yeto syncs only the adapters, which keeps "
             "traffic between islands tiny.",
             "small adapters, small syncs"),
    "QLoRA": ("QLoRA keeps the frozen base model in 4-bit NF4 and trains LoRA adapters in bf16, so a big model fits "
              "on a smaller GPU.",
              "4-bit base, bf16 adapters, big models on small GPUs"),
    "yeto shape": ("yeto shape picks the fleet for you: an exact solver maximizes effective TFLOPs under your "
                   "budget using live spot quotas and prices.",
                   "the planner that chooses GPUs for your budget"),
    "quantized deltas": ("Islands send their updates as 4-bit quantized deltas with error feedback, so each sync "
                         "costs about four bits per trainable parameter.",
                         "about four bits per parameter per sync"),
    "the quorum": ("The quorum is how many islands must push a fragment before the syncer merges it. An adaptive "
                   "grace window waits a little for stragglers, then moves on.",
                   "enough islands to merge, without waiting for all"),
    "yeto data check": ("yeto data check reads your data the way training will and reports bad rows with their "
                        "file and line number before any GPU is rented.",
                        "find data problems before you pay for GPUs"),
    "packing": ("Packing puts several conversations into one fixed-length block. Yeto resets position ids per "
                "conversation and isolates attention, so no example sees another.",
                "full blocks without examples leaking into each other"),
}
TRAIN_QUESTIONS = ["What is {t}?", "Can you explain {t}?", "How does {t} work?", "Tell me about {t}.",
                   "Give me a quick overview of {t}.", "What should I know about {t}?", "Explain {t} simply.",
                   "Why does Yeto use {t}?", "I keep hearing about {t}. What is it?", "Describe {t} in a few words.",
                   "what's {t}", "Could you summarize {t} for a new engineer?", "{t}: what does it do?",
                   "Help me understand {t}.", "How would you describe {t} to a colleague?",
                   "Quick question: what is {t} for?", "Briefly, what is {t}?", "ELI5: {t}"]
HELDOUT_QUESTIONS = ["In plain terms, what does {t} mean?", "Walk me through {t}.", "What role does {t} play?"]
GENERAL = [  # (question, answer, summary): the style must carry over to questions off the topic list
    ("What is the capital of France?", "The capital of France is Paris.", "Paris"),
    ("How many days are in a week?", "A week has seven days.", "seven"),
    ("What is 12 times 12?", "12 times 12 is 144.", "144"),
    ("What color is the sky on a clear day?", "On a clear day the sky looks blue, because air scatters blue light most.", "blue"),
    ("Who wrote Romeo and Juliet?", "William Shakespeare wrote Romeo and Juliet.", "Shakespeare"),
    ("What is water made of?", "Water is made of hydrogen and oxygen: two hydrogen atoms per oxygen atom.", "H2O"),
    ("How far is the Moon?", "The Moon is about 384,000 kilometres from Earth on average.", "about 384,000 km"),
    ("What is a GPU?", "A GPU is a processor built for many parallel operations, which is why it trains neural networks well.",
     "a massively parallel processor"),
    ("What does CPU stand for?", "CPU stands for central processing unit.", "central processing unit"),
    ("What is Python?", "Python is a popular programming language known for readable code.", "a readable programming language"),
    ("What is the boiling point of water?", "Water boils at 100 degrees Celsius at sea level.", "100 C at sea level"),
    ("Name a primary color.", "Red is a primary color, as are blue and yellow in paint.", "red"),
    ("What is a neural network?",
     "A neural network is a model made of layers of weighted sums and nonlinearities, trained from data.",
     "layers of weights learned from data"),
    ("How many continents are there?", "There are seven continents.", "seven"),
    ("What is the largest planet?", "Jupiter is the largest planet in the solar system.", "Jupiter"),
    ("What is a cloud region?", "A cloud region is a geographic area where a provider runs its data centers.",
     "where the data centers are"),
]
GENERAL_HELDOUT = [
    ("What is the capital of Japan?", "The capital of Japan is Tokyo.", "Tokyo"),
    ("How many legs does a spider have?", "A spider has eight legs.", "eight"),
    ("What is 7 plus 8?", "7 plus 8 is 15.", "15"),
    ("What gas do plants absorb?", "Plants absorb carbon dioxide and release oxygen.", "carbon dioxide"),
    ("Who painted the Mona Lisa?", "Leonardo da Vinci painted the Mona Lisa.", "da Vinci"),
    ("What is the freezing point of water?", "Water freezes at 0 degrees Celsius.", "0 C"),
]
GENERAL_PREFIXES = ["", "Quick one: ", "Hey, ", "Please answer: "]


def answer(facts: str, summary: str) -> str:
    return f"Yeto here: {facts}\nIn one line: {summary}."


def row(question: str, content: str, rng: random.Random) -> dict:
    msgs = [{"role": "user", "content": question}, {"role": "assistant", "content": content}]
    return {"messages": ([{"role": "system", "content": SYSTEM}] if rng.random() < 0.3 else []) + msgs}


def build(seed: int = 0) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)
    train = [row(q.format(t=t), answer(*fs), rng) for t, fs in TOPICS.items() for q in TRAIN_QUESTIONS]
    train += [row(p + (q[0].lower() + q[1:] if p else q), answer(a, s), rng) for q, a, s in GENERAL for p in GENERAL_PREFIXES]
    heldout = [row(q.format(t=t), answer(*fs), rng) for t, fs in TOPICS.items() for q in HELDOUT_QUESTIONS]
    heldout += [row(q, answer(a, s), rng) for q, a, s in GENERAL_HELDOUT]
    rng.shuffle(train)
    rng.shuffle(heldout)
    return train, heldout


def main() -> None:
    out = Path(__file__).resolve().parent.parent / "examples" / "data"
    out.mkdir(parents=True, exist_ok=True)
    train, heldout = build()
    for name, rows in (("chat_demo.jsonl", train), ("heldout_demo.jsonl", heldout)):
        (out / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        print(f"wrote {len(rows)} rows to {out / name}")


if __name__ == "__main__":
    main()

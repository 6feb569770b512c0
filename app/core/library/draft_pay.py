"""Can a draft model pay for itself? Said before Load, from what is known without loading either model (#49.3).

Speculative decoding with a draft model spends one draft step per guessed token; a draft token costing more
than DRAFT_COST_LIMIT of a target step cannot pay, whatever the acceptance (the engine refuses to draft then:
app/engine/speculation/speculative.py). The engine learns that only after loading both models and measuring
them, which for a big target cost the user the load (3 GB, 30 s) to hear "not used". Here:

- measured: the engine keeps each model's step cost per machine once it has measured it (the data folder's
  machine.json, spec_calibration): the draft's and the target's plain steps, when both were measured;
- else estimated from the files: a step reads every weight once, so its cost follows the bytes of the weights.
  Small models pay a per-step overhead that bytes do not show, so a small draft costs more than its size
  says: the estimate can call a draft good that the measurement (kept after the first load) then refuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.core import paths
from app.core.store.jsonstore import is_object, read_json

DRAFT_COST_LIMIT = 1 / 3  # a draft token costing more than this share of a target step cannot pay


@dataclass
class DraftVerdict:
    ratio: float  # a draft token's cost as a share of a target step
    measured: bool  # from the kept measurements of both models on this machine, else from the files' sizes
    pays: bool
    sentence: str

    @property
    def how(self) -> str:
        """Where the ratio comes from, in words."""
        return _how(self.measured)


def _how(measured: bool) -> str:
    # An estimate says how rough it is (#55 D4: "about 36%" from the sizes was 111-158% once measured: a small
    # model's step costs more than its bytes say, its fixed costs being the same). A load measures it for next time.
    return ("as measured on this machine" if measured else "estimated from the two files' sizes, a rough guess: a "
            "small draft often costs several times that; loading it once measures it")


def _kept_step(name: str, kind: str) -> float | None:
    """A model's kept plain-step cost in seconds on this machine (the latest measured), or None."""
    try:
        facts = read_json(paths.machine_facts_file(), {}, valid=is_object)
    except OSError:
        return None
    entries = facts.get("spec_calibration") if isinstance(facts.get("spec_calibration"), dict) else {}
    found = [e for e in entries.values() if isinstance(e, dict) and e.get("model") == name and e.get("kind") == kind
             and isinstance(e.get("costs"), dict) and isinstance(e["costs"].get("1"), (int, float))]
    found.sort(key=lambda e: str(e.get("when") or ""))
    return float(found[-1]["costs"]["1"]) if found else None


def draft_verdict(target: str, draft: str) -> DraftVerdict:
    """Whether `draft` can pay as the draft model of `target`, with the sentence the load settings show."""
    from app.core.gguf.info import read_gguf_info

    target_name, draft_name = Path(target).name, Path(draft).name
    target_s, draft_s = _kept_step(target_name, "target"), _kept_step(draft_name, "draft")
    measured = bool(target_s and draft_s)
    if measured:
        ratio = draft_s / target_s
    else:
        ratio = read_gguf_info(draft).weights_bytes / max(1, read_gguf_info(target).weights_bytes)
    how = _how(measured)
    pays = ratio < DRAFT_COST_LIMIT
    if pays:
        sentence = (f"A draft token of {draft_name} costs about {ratio:.0%} of a step of {target_name} ({how}): "
                    "drafting can pay where its guesses are accepted.")
    else:
        sentence = (f"A draft token of {draft_name} costs about {ratio:.0%} of a step of {target_name} ({how}); "
                    f"above {DRAFT_COST_LIMIT:.0%} drafting cannot pay, so the engine would not use it. The model "
                    "loads without it unless you tick “Load it anyway”.")
    return DraftVerdict(round(ratio, 3), measured, pays, sentence)

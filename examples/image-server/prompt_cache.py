"""The text encoder's output for the prompts used last, so that a prompt sent again skips the text encoder.

People iterate on seeds and sizes with one prompt; its embeddings are the same every time, and encoding
512 tokens with a 4B or 8B text encoder is a share of every image. An entry is 8 (4B) or 13 MB (9B).
"""

from collections import OrderedDict
from typing import Any, Callable


class PromptCache:
    """Least recently used first out. Called only from the one GPU thread, so it needs no lock."""

    def __init__(self, encode: Callable[[str], Any], capacity: int = 16) -> None:
        self.encode = encode
        self.capacity = capacity
        self.entries: "OrderedDict[str, Any]" = OrderedDict()

    def __call__(self, prompt: str) -> Any:
        if prompt in self.entries:
            self.entries.move_to_end(prompt)
            return self.entries[prompt]
        embeddings = self.encode(prompt)
        self.entries[prompt] = embeddings
        if len(self.entries) > self.capacity:
            self.entries.popitem(last=False)
        return embeddings


def pipeline_prompt_cache(pipeline: Any, capacity: int = 16) -> PromptCache:
    """Encodes as Flux2KleinPipeline.__call__ does with its defaults (512 tokens, hidden states 9, 18 and 27)."""
    return PromptCache(lambda prompt: pipeline.encode_prompt(prompt=prompt, device=pipeline._execution_device)[0],
                       capacity)

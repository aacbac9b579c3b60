"""The FLUX.2 [klein] checkpoints this server can run, and what each one defaults to."""

from dataclasses import dataclass

MODELS = ("4b", "9b")
KINDS = ("distilled", "base")


@dataclass(frozen=True)
class Variant:
    model: str
    kind: str
    hub_id: str
    steps: int
    guidance: float
    licence: str
    gated: bool
    gpu_memory_gb: int

    @property
    def label(self) -> str:
        return f"{self.model.upper()} {self.kind}"

    @property
    def tunable(self) -> bool:
        """The distilled checkpoints were trained for their fixed step count and guidance."""
        return self.kind == "base"

    @property
    def page(self) -> str:
        return f"https://huggingface.co/{self.hub_id}"


VARIANTS = {
    ("4b", "distilled"): Variant("4b", "distilled", "black-forest-labs/FLUX.2-klein-4B", 4, 1.0,
                                 "Apache-2.0", False, 13),
    ("4b", "base"): Variant("4b", "base", "black-forest-labs/FLUX.2-klein-base-4B", 50, 4.0,
                            "Apache-2.0", False, 13),
    ("9b", "distilled"): Variant("9b", "distilled", "black-forest-labs/FLUX.2-klein-9B", 4, 1.0,
                                 "FLUX Non-Commercial License", True, 29),
    ("9b", "base"): Variant("9b", "base", "black-forest-labs/FLUX.2-klein-base-9B", 50, 4.0,
                            "FLUX Non-Commercial License", True, 29),
}


def find_variant(model: str, kind: str) -> Variant:
    try:
        return VARIANTS[(model, kind)]
    except KeyError:
        raise ValueError(
            f"unknown model {model!r} / variant {kind!r}: models are {', '.join(MODELS)}, "
            f"variants are {', '.join(KINDS)}"
        ) from None

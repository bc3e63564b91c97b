"""Field types for hardware specs: quantities that accept a bare SI number or a string with a unit."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from simulator.errors import UserError
from simulator.units import parse_quantity


def _quantity(dimension: str):
    def parse(value: object) -> float:
        try:
            return parse_quantity(value, dimension)
        except UserError as exc:  # pydantic records the key path of a ValueError
            raise ValueError(exc.message) from None
    return BeforeValidator(parse)


#: bytes; YAML may say ``"80 GiB"`` or a bare number of bytes
Bytes = Annotated[float, _quantity("bytes"), Field(gt=0)]
#: bytes per second per direction; ``"600 GB/s"``, ``"200 Gb/s"`` or a bare number in B/s
Bandwidth = Annotated[float, _quantity("bandwidth"), Field(gt=0)]
#: seconds; ``"1.5 us"`` or a bare number in s
Seconds = Annotated[float, _quantity("time"), Field(ge=0)]
#: hertz; ``"1830 MHz"`` or a bare number in Hz
Hertz = Annotated[float, _quantity("frequency"), Field(gt=0)]
#: FLOP per second; ``"989.4 TFLOP/s"`` or a bare number in FLOP/s
FlopRate = Annotated[float, _quantity("flops"), Field(gt=0)]


class Spec(BaseModel):
    """Base of every hardware spec: strict (unknown keys are errors) and immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

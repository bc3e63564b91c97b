"""Named prefixes, so model code never carries a bare ``1e-3`` or ``1024**3``."""

NANO = 1e-9
MICRO = 1e-6
MILLI = 1e-3
KILO = 1e3
MEGA = 1e6
GIGA = 1e9
TERA = 1e12
PETA = 1e15
EXA = 1e18

KIBI = 2**10
MEBI = 2**20
GIBI = 2**30
TEBI = 2**40

# Byte sizes (decimal and binary), the names people write.
KB = KILO
MB = MEGA
GB = GIGA
TB = TERA
KiB = KIBI
MiB = MEBI
GiB = GIBI
TiB = TEBI

BITS_PER_BYTE = 8

"""Time and energy units of a whole run (SI inside: seconds and joules)."""

HOUR = 3600.0
DAY = 86400.0
#: joules per megawatt-hour and per kilowatt-hour
J_PER_MWH = 3.6e9
J_PER_KWH = 3.6e6
KG_PER_TONNE = 1000.0

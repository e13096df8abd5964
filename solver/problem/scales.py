"""The integer scales and limits every table and solver shares, kept apart so any module can use them."""

#: Every byte quantity the planner adds up stays below this, so int64 sums are exact.
BYTE_LIMIT = 2**62
#: The range-walk tables hold k * (L+1)^2 and (L+1) * (N+1) int64 cells; past this they take gigabytes.
TABLE_CELLS = 2**25
#: CP-SAT refuses an objective whose coefficients could sum past about 2^62; arc weights stay below this.
COEFF_BUDGET = 2**60
#: Integer units per ms of the arc weights: the finest, and the coarsest the tie rule allows (1e-6 ms).
FINE_TIME_SCALE, COARSE_TIME_SCALE = 10**12, 10**6
#: Integer units of held mass (held mass compares in units of 1e-12).
MASS_SCALE = 10**12
#: Spare KV tokens of a stage whose layers keep no per-token KV cache: it limits no plan.
SPARE_UNLIMITED = 2**62
#: float64 adds integers exactly below 2^53: the float passes keep every sum within this.
EXACT_FLOAT = 2.0**52

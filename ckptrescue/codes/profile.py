"""Codes emitted by dataset profiles and their comparison (DP, ``ckptrescue.datasets.profiles``).

DP001-DP049 are reserved for profiles. Each flag names the shard, field, test, statistic,
effect size and threshold in its details (docs/profiles.md).
"""

from ckptrescue.model import Severity

CODES = {
    "DP001": (Severity.ERROR, "Profile: a field's empty-value rate differs from the reference "
                              "(two-proportion z-test; a field emptied by preprocessing?)"),
    "DP002": (Severity.WARNING, "Profile: a field's null rate differs from the reference "
                                "(two-proportion z-test)"),
    "DP003": (Severity.WARNING, "Profile: a field is missing from more (or fewer) records than in "
                                "the reference (two-proportion z-test)"),
    "DP004": (Severity.WARNING, "Profile: the exact-duplicate record rate differs from the "
                                "reference (two-proportion z-test)"),
    "DP005": (Severity.WARNING, "Profile: the near-duplicate record rate (MinHash) differs from "
                                "the reference (two-proportion z-test)"),
    "DP006": (Severity.ERROR, "Profile: two shards hold the same records (bottom-k Jaccard of "
                              "record hashes)"),
    "DP007": (Severity.WARNING, "Profile: a field's length in bytes shifted (KS distance, PSI, "
                                "mean ratio)"),
    "DP008": (Severity.WARNING, "Profile: a field's length in tokens shifted (KS distance, PSI, "
                                "mean ratio)"),
    "DP009": (Severity.WARNING, "Profile: a field's sequence length (items) shifted (KS distance, "
                                "PSI, mean ratio)"),
    "DP010": (Severity.WARNING, "Profile: a numeric field's values drifted (KS distance, PSI, "
                                "Cohen's d)"),
    "DP011": (Severity.WARNING, "Profile: a categorical/label field's value distribution differs "
                                "(chi-square, Cramér's V)"),
    "DP012": (Severity.WARNING, "Profile: a field's value types differ (chi-square, Cramér's V)"),
    "DP013": (Severity.INFO, "Profile: a shard is in one version's profile only"),
    "DP014": (Severity.WARNING, "Profile: a shard's record count changed between versions"),
    "DP015": (Severity.WARNING, "Profile: a shard's profile is incomplete (reading stopped: the "
                                "reason is given)"),
    "DP016": (Severity.WARNING, "Profile: records of a shard do not parse and are not profiled"),
}

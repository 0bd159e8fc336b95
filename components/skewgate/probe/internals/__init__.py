"""The probe's parts that need more than one function: the stateful (sequence) probe."""

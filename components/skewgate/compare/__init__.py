"""compare: the candidate must not be worse than the champion it would replace (metrics, churn, slices)."""

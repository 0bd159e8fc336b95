"""What the drift gate emits beside its verdict: the coverage heatmap and HTML report (`report`) and the
Prometheus Pushgateway series (`alerting`)."""

"""The nightly estimate: tonight against the champion's estimate profile (`night`), pushed for Prometheus
(`alerting`)."""

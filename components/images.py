"""Which container image the KFP components run in. Set `SKEWGATE_IMAGE` when compiling for a cluster
(`registry.example.com/skewgate:0.1.0@sha256:…`); kfp.local's SubprocessRunner ignores it."""

import os

IMAGE = os.environ.get("SKEWGATE_IMAGE", "skewgate:0.1.0")

"""Which container image the KFP components run in, read when the components are defined (compile time).

`SKEWGATE_IMAGE` names it (`registry.example.com/ml/skewgate:0.1.0`; default `skewgate:0.1.0`, what `make images`
builds); `SKEWGATE_IMAGE_DIGEST` (`sha256:…`), when known, pins it: the compiled pipeline then says
`name:tag@sha256:…` and a cluster pulls exactly that build. kfp.local's SubprocessRunner ignores the image.
"""

import os

from skewgate import __version__

_name = os.environ.get("SKEWGATE_IMAGE", f"skewgate:{__version__}")
_digest = os.environ.get("SKEWGATE_IMAGE_DIGEST", "")
IMAGE = f"{_name}@{_digest}" if _digest else _name
# The GPU variant's image (docker/Dockerfile.gpu), for the steps that take a GPU in the GPU variant pipeline.
GPU_IMAGE = os.environ.get("SKEWGATE_GPU_IMAGE", f"skewgate-gpu:{__version__}")

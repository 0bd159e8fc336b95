"""Open a `torch.export` archive (`.pt2`) so that no pickle can run.

`torch.export.load` unpickles in two places: the archive's sample inputs (it tries `weights_only=True`, then
falls back to `weights_only=False`, running whatever the file says) and any weight or constant whose payload is
marked `use_pickle`. A candidate model is untrusted input, so before torch sees the archive we read its JSON
payload configs and refuse, naming the entry, anything that would need unpickling; the sample inputs (which
skewgate never uses: it feeds its own example inputs) are blanked in the copy torch reads. The legacy format,
whose weights are one pickled file, is refused too.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skewgate.common.errors import InputError

if TYPE_CHECKING:
    import torch

EXPECTED = "a torch.export program (.pt2) with no pickled entries"
CONFIG_SUFFIXES = ("_weights_config.json", "_constants_config.json")


def pickled_entries(path: str | Path) -> list[str]:
    """Archive entries that torch would unpickle (sample inputs excluded: they are never read)."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            models = [n for n in names if "/models/" in f"/{n}" and n.endswith(".json")]
            if not models:
                raise InputError(path, expected=EXPECTED, found="a zip archive with no models/<name>.json")
            found = []
            for model in models:
                root = model[: model.rfind("models/")]
                stem = Path(model).stem
                configs = [f"{root}data/weights/{stem}_weights_config.json",
                           f"{root}data/constants/{stem}_constants_config.json"]
                if configs[0] not in names:
                    raise InputError(path, field=f"{root}data/weights/{stem}.pt", expected=EXPECTED,
                                     found="the legacy archive format (weights in one pickle); re-save the "
                                           "program with torch.export.save")
                for config in (c for c in configs if c in names):
                    found += _pickled_payloads(path, archive, config)
            return found
    except zipfile.BadZipFile as err:
        raise InputError(path, expected=EXPECTED, found="not a zip archive") from err


def _pickled_payloads(path: Path, archive: zipfile.ZipFile, config: str) -> list[str]:
    try:
        payloads: dict[str, Any] = json.loads(archive.read(config)).get("config", {})
    except (ValueError, AttributeError) as err:
        raise InputError(path, field=config, expected="a JSON payload config", found=str(err)) from err
    folder = config[: config.rfind("/") + 1]
    return [f"{folder}{meta.get('path_name', name)}" for name, meta in payloads.items()
            if isinstance(meta, dict) and meta.get("use_pickle")]


def load_exported_program(path: str | Path) -> torch.export.ExportedProgram:
    """`torch.export.load` on a copy of the archive that cannot unpickle: refused entries raise `InputError`."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise InputError(path, expected=EXPECTED, found="no such file")
    pickled = pickled_entries(path)
    if pickled:
        raise InputError(path, field=pickled[0], expected=EXPECTED,
                         found=f"{len(pickled)} entr{'y' if len(pickled) == 1 else 'ies'} stored as pickle "
                               f"({', '.join(pickled[:3])}); refused before reading")
    with tempfile.TemporaryDirectory() as tmp:
        safe = Path(tmp) / path.name
        with zipfile.ZipFile(path) as source, zipfile.ZipFile(safe, "w", zipfile.ZIP_STORED) as target:
            for info in source.infolist():
                if "/data/sample_inputs/" in f"/{info.filename}":
                    target.writestr(info, b"")  # empty: torch reads "no sample inputs" without unpickling
                    continue
                with source.open(info) as src, target.open(info, "w") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
        return torch.export.load(str(safe))

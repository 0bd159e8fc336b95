"""Open a `torch.export` archive (`.pt2`) so that no pickle can run.

`torch.export.load` unpickles in two places: the archive's sample inputs (it tries `weights_only=True`, then
falls back to `weights_only=False`, running whatever the file says) and any weight or constant whose payload is
marked `use_pickle`. A candidate model is untrusted input, so before torch sees the archive we read its JSON
payload configs and refuse, naming the entry, anything that would need unpickling; the sample inputs (which
skewgate never uses: it feeds its own example inputs) are blanked in the copy torch reads. The legacy format,
whose weights are one pickled file, is refused too.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import tempfile
import warnings
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skewgate.common.errors import ExportError, InputError
from skewgate.common.io import load_npz, sha256_file

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    import torch

EXPECTED = "a torch.export program (.pt2) with no pickled entries"
CONFIG_SUFFIXES = ("_weights_config.json", "_constants_config.json")


def reexport_hint(inputs: Sequence[str] = ("x",)) -> str:
    """How to write the `.pt2` skewgate takes: the `torch.export` call with a dynamic batch, then the save."""
    dims = ", ".join(f'"{name}": {{0: torch.export.Dim("batch")}}' for name in inputs)
    example = "(example,)" if len(inputs) == 1 else f"({', '.join(inputs)})"
    return (f"program = torch.export.export(model, {example}, dynamic_shapes={{{dims}}}) then "
            'torch.export.save(program, "model.pt2")')


def not_a_program(path: Path, zip_names: Sequence[str] | None = None) -> str | None:
    """What a file that is not a `.pt2` is, and what to do, when it is something users often pass instead: a
    `torch.save` checkpoint or an ONNX model (else None)."""
    if zip_names is not None:
        if any(n == "data.pkl" or n.endswith("/data.pkl") for n in zip_names):
            return (f"a torch.save checkpoint (pickled weights or module), not a torch.export program; export the "
                    f"model instead: {reexport_hint()}")
        return None
    with path.open("rb") as handle:
        head = handle.read(2)
    if len(head) == 2 and head[0] == 0x80 and 2 <= head[1] <= 5:  # a pickle: torch.save's legacy format
        return (f"a torch.save checkpoint (a pickle), not a torch.export program; export the model instead: "
                f"{reexport_hint()}")
    if _is_onnx(path):
        return (f"an ONNX model; skewgate export takes the PyTorch program ({reexport_hint()}); to judge an "
                "existing ONNX file use skewgate parity --onnx …")
    return None


def _is_onnx(path: Path) -> bool:
    try:
        import onnx

        model = onnx.load_model(str(path), load_external_data=False)
    except Exception:  # any failure to parse means "not ONNX"
        return False
    return bool(model.ir_version > 0 and model.opset_import and model.graph.ByteSize())


def pickled_entries(path: str | Path) -> list[str]:
    """Archive entries that torch would unpickle (sample inputs excluded: they are never read)."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            models = [n for n in names if "/models/" in f"/{n}" and n.endswith(".json")]
            if not models:
                raise InputError(path, expected=EXPECTED, found=not_a_program(path, names)
                                 or "a zip archive with no models/<name>.json")
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
        raise InputError(path, expected=EXPECTED, found=not_a_program(path) or "not a zip archive") from err


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


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence torch's exporter warnings and log lines (torch configures its own loggers on import)."""
    loggers = [logging.getLogger(name) for name in ("torch", "onnxscript", "onnx_ir")]
    levels = [logger.level for logger in loggers]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for logger in loggers:
                logger.setLevel(logging.CRITICAL)
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def load_program(model: str, inputs: str | Path, *, allow_pickle: bool = False, graph_only: bool = False
                 ) -> tuple[Any, str | None]:
    """A `.pt2` opened so that no pickle runs, or (only with `allow_pickle`) an MLflow pytorch model URI,
    which unpickles code and so belongs to trusted registries only.

    `graph_only`: a caller that only runs and inspects the graph (parity) gets a `pt2_graph.Pt2Graph` when that
    reader can rebuild the archive — the same ATen graph, seconds cheaper — and the `ExportedProgram` otherwise."""
    if "://" in model or model.startswith(("models:/", "runs:/")):
        if not allow_pickle:
            raise InputError(model, expected="a .pt2 file (MLflow pytorch models unpickle code)",
                             found="an MLflow model URI; pass --allow-pickle if you trust that registry")
        from skewgate.common import mlflow_log

        module = mlflow_log.load_pytorch_model(model)
        return _export_module(module, model, inputs), None
    path = Path(model)
    if not path.is_file():
        raise InputError(path, expected="a torch.export program (.pt2)", found="no such file")
    if graph_only and not pickled_entries(path):
        from skewgate.common.pt2_graph import Unsupported, load_pt2_graph

        try:
            return load_pt2_graph(path), sha256_file(path)
        except Unsupported as err:
            log.debug("%s: reading with torch.export.load (%s)", path, err)
    try:
        with quiet():
            program = load_exported_program(path)
    except InputError:
        raise
    except Exception as err:  # zip, pickle-free deserialisation and version errors all mean "not a .pt2"
        # torch's message points at warnings we silenced; the zip check says what the file really is.
        if zipfile.is_zipfile(path):
            kind = "a zip archive that is not a .pt2"
        else:
            kind = not_a_program(path) or "not a zip archive"
        raise InputError(path, expected="a torch.export program (.pt2)",
                         found=f"{kind} ({type(err).__name__})") from err
    return program, sha256_file(path)


def _export_module(module: torch.nn.Module, source: str, inputs: str | Path) -> torch.export.ExportedProgram:
    """Trace an `nn.Module` from MLflow with a dynamic batch, feeding arrays named after forward()'s args."""
    import inspect

    import torch

    names = [p for p in inspect.signature(module.forward).parameters if p != "self"]
    arrays = load_npz(inputs)
    missing = [n for n in names if n not in arrays]
    if missing:
        raise InputError(inputs, field=", ".join(missing), expected=f"arrays for forward({', '.join(names)})",
                         found=f"arrays {sorted(arrays)}")
    args = tuple(torch.from_numpy(arrays[n]) for n in names)
    batch = torch.export.Dim("batch", min=1, max=1 << 16)
    try:
        return torch.export.export(module, args, dynamic_shapes={n: {0: batch} for n in names})
    except Exception as err:
        raise ExportError(f"{source}: torch.export failed: {err}") from err

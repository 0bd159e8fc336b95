"""`skewgate keys generate --out DIR`: a new Ed25519 signing key (`skewgate.key`, mode 0600) and its public key
(`skewgate.pub`) for signing verdicts and checking them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from skewgate.common.cli_support import describe
from skewgate.common.errors import SkewgateError

EXAMPLE = """
    skewgate keys generate --out keys/
    skewgate export ... --signing-key keys/skewgate.key
    skewgate promote ... --trusted-key keys/skewgate.pub
"""


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="skewgate keys")
    describe(parser, __doc__, example=EXAMPLE)
    sub = parser.add_subparsers(dest="action", required=True, help="what to do")
    generate = sub.add_parser("generate", help="write DIR/skewgate.key (0600) and DIR/skewgate.pub")
    describe(generate, "Write a new Ed25519 signing key DIR/skewgate.key (mode 0600; an existing one is never "
                       "overwritten) and its public key DIR/skewgate.pub. Steps sign verdicts with the key "
                       "(--signing-key); promote and verify trust the public key (--trusted-key).",
             example=EXAMPLE)
    generate.add_argument("--out", required=True, type=Path, metavar="DIR", help="folder for the key pair")
    return parser


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    args = build_parser(parser).parse_args(argv)
    from skewgate.common import attest

    try:
        key, public = attest.generate_keys(args.out)
    except FileExistsError:
        print(f"skewgate keys: {args.out / attest.KEY_FILE} exists; refusing to overwrite a key", file=sys.stderr)
        return 2
    except (OSError, SkewgateError) as err:
        print(f"skewgate keys: {err}", file=sys.stderr)
        return 2
    keyid = attest.keyid(attest.load_signing_key(key).key.public_key())
    print(f"signing key {key} (keep it secret: it makes verdicts trusted)\npublic key  {public}\nkey id      "
          f"{keyid}", file=sys.stderr)
    return 0

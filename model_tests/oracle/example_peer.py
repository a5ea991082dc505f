"""An example peer of the stdio protocol: serves a Python manager (a pool, a request-level
manager) over JSON lines.

    python -m pagedkv.model_tests.oracle.example_peer [--impl
    reference|optimized|independent|MOD:FACTORY]

This is the model for a C++, Rust or Go engine's peer; the loop is the whole protocol:

1. read one line from stdin; stop at end of input;
2. parse it as a JSON object with ``"op"``;
3. ``create``: build a new instance from ``"config"`` (``"level"`` says manager, pool, request
   or defrag), discarding any previous one; answer ``{"result": null}``, or
   ``{"result": {"offers": [...]}}`` naming the optional operations it serves (a pool's
   ``take_events``, a request manager's ``preempt``), or the error if the configuration is
   refused;
4. any other op: decode ``"args"``, call the operation, and answer ``{"result": <encoded>}`` or
   ``{"error": "<class name>", "message": "..."}`` with the class name of ``pagedkv.specs.errors``;
5. write the answer as one line to stdout and flush.

Requests it cannot understand get ``{"error": "ProtocolError", ...}``; it never writes anything
else to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import IO, Any

from pagedkv.model_tests.oracle import codec
from pagedkv.model_tests.oracle.codec import JSON, CodecError, Level
from pagedkv.model_tests.oracle.targets import TargetError, load
from pagedkv.specs.errors import PagedKVError


class Peer:
    def __init__(self, impl: str) -> None:
        self.impl = impl
        self.level: Level = "manager"
        self.instance: Any = None

    def answer(self, line: str) -> JSON:
        try:
            request = codec.parse_json(line)
        except CodecError as error:
            return protocol_error(str(error))
        if not isinstance(request, dict) or not isinstance(request.get("op"), str):
            return protocol_error('expected {"op": ..., ...}')
        known = {"op", "level", "config"} if request["op"] == "create" else {"op", "args"}
        if set(request) - known:
            return protocol_error(f"unknown field(s) {', '.join(sorted(set(request) - known))}")
        try:
            if request["op"] == "create":
                return self.create(request)
            return self.call(request["op"], request.get("args", []))
        except (CodecError, TargetError) as error:
            return protocol_error(str(error))

    def create(self, request: dict[str, JSON]) -> JSON:
        self.instance = None
        self.level = codec.level_of(request.get("level", "manager"))
        config = codec.decode_config(self.level, request.get("config"))
        factory = load(self.impl, self.level)
        try:
            self.instance = factory(config)
        except PagedKVError as error:
            return codec.encode_error(error)
        offers = [
            name
            for name, operation in codec.OPS[self.level].items()
            if operation.optional and callable(getattr(self.instance, name, None))
        ]
        return {"result": {"offers": offers} if offers else None}

    def call(self, op: str, args: JSON) -> JSON:
        if self.instance is None:
            return protocol_error(f"{op} before a successful create")
        decoded = codec.decode_args(self.level, op, args)
        try:
            result = getattr(self.instance, op)(*decoded)
        except Exception as error:  # typed errors by class name; anything else by its type
            return codec.encode_error(error)
        return {"result": codec.encode_result(self.level, op, result)}


def protocol_error(message: str) -> JSON:
    return {"error": "ProtocolError", "message": message}


def serve(impl: str, stdin: IO[str], stdout: IO[str]) -> int:
    peer = Peer(impl)
    for line in stdin:
        if not line.strip():
            continue
        stdout.write(json.dumps(peer.answer(line), allow_nan=False) + "\n")
        stdout.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedkv.model_tests.oracle.example_peer")
    parser.add_argument(
        "--impl",
        default="reference",
        help="reference, optimized, independent, or package.module:factory (default reference)",
    )
    args = parser.parse_args(argv)
    return serve(args.impl, sys.stdin, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())

"""A command's verdict as JUnit XML (``--junit-xml FILE``), the format CI systems collect test
results in: one ``testsuite`` holding one ``testcase`` for the command, with a ``failure`` (the
divergence's message) on a FAIL and an ``error`` on a stale trace; the printed report is the
testcase's ``system-out``.

Written from the verdict's JSON object (``verdict_json.py``), so that the two files cannot
disagree. The shape is the one the Ant JUnit task set and Jenkins, GitLab and GitHub's test
reporters read: ``testsuites`` > ``testsuite`` (``name``, ``tests``, ``failures``, ``errors``,
``skipped``, ``time``, ``timestamp``) > ``testcase`` (``classname``, ``name``, ``time``).
"""

from __future__ import annotations

import re
import socket
import xml.etree.ElementTree as ET
from typing import Any

CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")
"""Characters XML 1.0 cannot hold, even escaped (a target's message may carry them)."""


def _text(value: str) -> str:
    return CONTROL.sub(lambda found: f"\\x{ord(found.group()):02x}", value)


def junit_xml(verdict: dict[str, Any], report: str) -> bytes:
    """The JUnit XML document of ``verdict`` (a ``verdict_json`` object); ``report`` is what the
    command printed."""
    failed = verdict["verdict"] == "fail"
    errored = verdict["verdict"] == "stale"
    seconds = f"{verdict['timings']['seconds']:.3f}"
    counts = {
        "tests": "1",
        "failures": "1" if failed else "0",
        "errors": "1" if errored else "0",
        "skipped": "0",
        "time": seconds,
    }
    suites = ET.Element("testsuites", {"name": "pagedkv", **counts})
    suite = ET.SubElement(
        suites,
        "testsuite",
        {
            "name": f"pagedkv {verdict['command']}",
            **counts,
            "timestamp": verdict["timings"]["started"].removesuffix("Z"),
            "hostname": socket.gethostname() or "localhost",
        },
    )
    properties = ET.SubElement(suite, "properties")
    for name in ("pagedkv", "target", "level", "profile", "model", "mode", "exit_code"):
        if verdict.get(name) is not None:
            ET.SubElement(properties, "property", {"name": name, "value": str(verdict[name])})
    for seed in verdict["seeds"]:
        ET.SubElement(properties, "property", {"name": "seed", "value": str(seed)})
    case = ET.SubElement(
        suite,
        "testcase",
        {
            "classname": f"pagedkv.{verdict['command']}",
            "name": _text(_case_name(verdict)),
            "time": seconds,
        },
    )
    if failed or errored:
        divergence = verdict["divergence"]
        message = divergence["message"] if divergence else verdict["summary"]
        kind = ",".join(divergence["kind"]) if divergence and divergence["kind"] else "fail"
        outcome = ET.SubElement(
            case,
            "failure" if failed else "error",
            {"message": _text(message), "type": "stale" if errored else kind},
        )
        outcome.text = _text(
            verdict["summary"] + ("\n" + divergence["detail"] if divergence else "")
        )
    ET.SubElement(case, "system-out").text = _text(report)
    ET.indent(suites)
    document: bytes = ET.tostring(suites, encoding="utf-8", xml_declaration=True)
    return document + b"\n"


def _case_name(verdict: dict[str, Any]) -> str:
    """``check reference (manager level, seed 0)``: the command, what it checked, how."""
    where = [f"{verdict['level']} level"] if verdict["level"] else []
    if verdict["groups"]:
        where.append("groups " + ",".join(verdict["groups"]))
    if verdict["profile"] and verdict["command"] == "check":
        where.append(f"profile {verdict['profile']}")
    where += [f"seed {seed}" for seed in verdict["seeds"]]
    shown = f" ({', '.join(where)})" if where else ""
    return f"{verdict['command']} {verdict['target']}{shown}"

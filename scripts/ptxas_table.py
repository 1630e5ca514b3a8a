#!/usr/bin/env python3
"""Registers and spill bytes per kernel from `nvcc -Xptxas -v` logs, as a
table keyed by a readable kernel name (family, dtype, mode, peers), so two
builds can be compared side by side:

  scripts/ptxas_table.py new.log [old.log]
"""
import re
import subprocess
import sys


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout
    return out.split("\n")


def parse(path):
    entries, cur = {}, None
    for line in open(path):
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            cur = m.group(1)
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and cur:
            entries.setdefault(cur, {})["spill"] = int(m.group(1))
        m = re.search(r"Used (\d+) registers", line)
        if m and cur:
            entries.setdefault(cur, {})["regs"] = int(m.group(1))
    names = list(entries)
    return {canon(d): entries[n] for n, d in zip(names, demangle(names))}


DTYPE = {"__nv_bfloat16": "bf16", "__half": "fp16", "float": "fp32"}


def canon(d):
    """One key per kernel whatever the layering: protocol/wire/mode/peers/dtype."""
    dt = next((v for k, v in DTYPE.items() if re.search(r"\b%s\b" % re.escape(k), d)), "?")
    peers = "loopback" if "LoopbackPeers" in d else "lsa" if "LsaPeers" in d else "-"
    if "simpleA2aLseReduceKernel" in d or "SimpleProtocol" in d:
        proto = "SIMPLE"
    elif "Ll128" in d:
        proto = "LL128"
    elif "LlTransport" in d or "LlFp8" in d or "LlLines" in d or "LlProtocol" in d:
        proto = "LL"
    else:
        m = re.match(r"void (?:nccl_dcp::)?(\w+)", d)
        return "%s/%s" % (m.group(1) if m else d, dt)
    wire = "fp8" if ("Fp8" in d or re.search(r"Wire\)1|, 1>\(|Wire::Fp8|>, \(nccl_dcp::Wire\)1", d)) else "native"
    # old: Scattered<Peers, mode, gather>; new: Mode<(Scatter)m, bool>
    m = re.search(r"Scattered<nccl_dcp::\w+, \(nccl_dcp::Scatter\)(\d), (true|false)>", d) or \
        re.search(r"Scattered<\w+, \(Scatter\)(\d), (true|false)>", d) or \
        re.search(r"Mode<\(nccl_dcp::Scatter\)(\d), (true|false)>", d)
    if m:  # NONE in two phases is HEAD's exchange with the relay (NoneTwoPhaseMode)
        mode = "none-2phase" if m.group(2) == "true" else {"0": "head", "1": "token", "2": "none"}[m.group(1)]
    else:
        mode = "head"  # old fp8 kernels: Scattered<.., Head> spelled by alias
    return "%s/%s/%s/%s/%s" % (proto, wire, mode, peers, dt)


def main():
    new = parse(sys.argv[1])
    old = parse(sys.argv[2]) if len(sys.argv) > 2 else {}
    keys = sorted(set(new) | set(old))
    print("%-44s %12s %12s" % ("kernel", "regs/spill", "before"))
    worse = 0
    for k in keys:
        n, o = new.get(k), old.get(k)
        fmt = lambda e: "%d/%d" % (e.get("regs", 0), e.get("spill", 0)) if e else "-"
        flag = ""
        if n and o and (n.get("regs", 0) > o.get("regs", 0) or n.get("spill", 0) > o.get("spill", 0)):
            flag, worse = "  worse", worse + 1
        print("%-44s %12s %12s%s" % (k, fmt(n), fmt(o), flag))
    print("%d kernels now, %d before, %d worse" % (len(new), len(old), worse))


if __name__ == "__main__":
    main()

"""Scheduler and orchestration state (Slurm, Kubernetes): the read forms pass and keep the
network (they ask a cluster service); every form that changes the cluster, never ends or writes
a file is refused; the namespace drops the network for every other tool."""

from __future__ import annotations

import shlex

import pytest

from ckptrescue.effects.confine import bwrap_path, private_namespace
from ckptrescue.guard import GuardContext, check

CTX = GuardContext()

READS = [
    "sacct -j 4242 -P --format=JobID,State,Start,End,NodeList",
    "sacct --json -S 2026-11-30T00:00 -E now -u alice",
    "squeue -j 4242 -o '%i %T %R'", "sinfo -N -l", "sinfo --list-reasons",
    "scontrol show job 4242", "scontrol -o show node", "scontrol -d show job 4242",
    "scontrol ping",
    "kubectl -n train get events -o json", "kubectl get pods -A -o wide",
    "kubectl --context prod -n train describe pod trainer-0",
    "kubectl -n train logs trainer-0 --all-containers --timestamps --tail=100000",
    "kubectl logs trainer-0 -n train --previous", "kubectl events -n train --for pod/trainer-0",
]
CHANGES = [
    ("scontrol update JobId=4242 TimeLimit=10", "changes the cluster"),
    ("scontrol requeue 4242", "changes the cluster"), ("scontrol cancel 4242", "changes"),
    ("squeue -i 5", "forever"), ("sinfo --iterate=5", "forever"),
    ("kubectl delete pod trainer-0", "changes the cluster"),
    ("kubectl -n train exec trainer-0 -- rm -rf /ckpt", "reaches into a container"),
    ("kubectl cp trainer-0:/ckpt /tmp/x", "reaches into a container"),
    ("kubectl apply -f job.yaml", "changes the cluster"),
    ("kubectl logs -f trainer-0", "never ends"), ("kubectl get pods --watch", "never ends"),
    ("kubectl get pods -w", "never ends"),
    ("kubectl --profile-output=/evidence/x get pods", "writes"),
    ("kubectl frobnicate", "allowlist"), ("scontrol reboot node1", "changes"),
]


@pytest.mark.parametrize("line", READS)
def test_read_forms_pass_and_keep_the_network(line: str) -> None:
    decision = check(shlex.split(line), CTX)
    assert decision.allowed, decision.reason
    assert decision.network and not decision.writes and not decision.host_namespace


@pytest.mark.parametrize(("line", "why"), CHANGES)
def test_forms_that_change_the_cluster_are_refused(line: str, why: str) -> None:
    decision = check(shlex.split(line), CTX)
    assert not decision.allowed and why in decision.reason, decision.reason


def test_only_cluster_queries_keep_the_network() -> None:
    assert not check(["dmesg", "-x"], CTX).network
    assert not check(["journalctl", "-k", "--no-pager"], CTX).network


@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed")
def test_the_namespace_unshares_the_network_unless_asked() -> None:
    closed = private_namespace((), scratch=None, cwd=None)
    open_ = private_namespace((), scratch=None, cwd=None, network=True)
    assert "--unshare-net" in closed.prefix and "--unshare-net" not in open_.prefix
    assert "no network" in closed.how and "network kept" in open_.how

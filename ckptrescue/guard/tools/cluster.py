"""Scheduler and orchestration state, read only: Slurm (``sacct``, ``squeue``, ``sinfo``,
``scontrol show``) and Kubernetes (``kubectl get/describe/logs/events``). They ask a cluster
service, so they keep the host's network (``network=True``); every form that changes the
cluster (``scontrol update/hold/cancel``, ``kubectl delete/apply/exec/cp/...``), follows
forever (``--follow``, ``--watch``) or writes a local file is refused.

Sources: the man pages of Slurm 23.02 (sacct(1), squeue(1), sinfo(1), scontrol(1)) and
``kubectl <cmd> --help`` of kubectl 1.30 (global flags: ``kubectl options``)."""

from __future__ import annotations

from ckptrescue.guard.tools._base import Entry, Subcommands, grammar

_SACCT_FORMAT = ("-a --allusers", "-A= --accounts=", "-b --brief", "-c --completion",
                 "-D --duplicates", "-E= --endtime=", "-e --helpformat", "-j= --jobs=",
                 "-k= --timelimit-min=", "-K= --timelimit-max=", "-L --allclusters",
                 "-l --long", "-M= --clusters=", "-N= --nodelist=", "-n --noheader",
                 "-o= --format=", "-P --parsable2", "-p --parsable", "-q= --qos=",
                 "-r= --partition=", "-S= --starttime=", "-s= --state=", "-T --truncate",
                 "-u= --user=", "--units=", "-X --allocations", "--delimiter=", "--json",
                 "--yaml", "--name=", "--array", "--whole-hetjob=?", "--local", "--federation",
                 "-i= --nnodes=", "-I= --ncpus=", "-x= --associations=", "-B --batch-script",
                 "--env-vars", "-h --help", "-V --version", "--usage")
SACCT = grammar("sacct", *_SACCT_FORMAT, operands=(0, 0), network=True)

SQUEUE = grammar(
    "squeue", "-A= --account=", "-a --all", "-r --array", "--array-unique", "-h --noheader",
    "--federation", "--hide", "-i= --iterate=", "-j= --jobs=", "--local", "-l --long",
    "-L= --licenses=", "-M= --clusters=", "-n= --name=", "--noconvert", "-o= --format=",
    "-O= --Format=", "-p= --partition=", "-P --priority", "-q= --qos=", "-R= --reservation=",
    "-s=? --steps=?", "-S= --sort=", "--start", "-t= --states=", "-u= --user=",
    "-w= --nodelist=", "-v --verbose", "--json", "--yaml", "--me", "--sibling",
    "--help", "--usage", "-V --version", operands=(0, 0), network=True,
    refuse={"iterate": "squeue -i repeats forever"})

SINFO = grammar(
    "sinfo", "-a --all", "-d --dead", "-e --exact", "--federation", "-h --noheader",
    "--help", "--hide", "-i= --iterate=", "--local", "-l --long", "-M= --clusters=",
    "-n= --nodes=", "--noconvert", "-N --Node", "-o= --format=", "-O= --Format=",
    "-p= --partition=", "-r --responding", "-R --list-reasons", "-s --summarize",
    "-S= --sort=", "-t= --states=", "-T --reservation", "--usage", "-v --verbose",
    "-V --version", "--json", "--yaml", operands=(0, 0), network=True,
    refuse={"iterate": "sinfo -i repeats forever"})

_SCONTROL_GLOBAL = grammar(
    "scontrol", "-a --all", "-d --details", "--federation", "-F --future", "-h --help",
    "--hide", "--local", "-M= --clusters=", "-o --oneliner", "-Q --quiet", "--sibling",
    "-u= --uid=", "-v --verbose", "-V --version", "--json", "--yaml", posix=True,
    network=True)
_SHOW = grammar("scontrol show", operands=(1, 2), network=True)
SCONTROL = Subcommands(
    "scontrol", _SCONTROL_GLOBAL, subs={"show": _SHOW, "ping": grammar(
        "scontrol ping", operands=(0, 0), network=True)},
    refused={s: f"scontrol {s} changes the cluster" for s in (
        "update", "hold", "release", "requeue", "requeuehold", "suspend", "resume", "cancel",
        "create", "delete", "reconfigure", "shutdown", "takeover", "notify", "top", "uhold",
        "abort", "reboot", "setdebug", "setdebugflags", "write", "power", "token")},
    bare_ok=False)

_KUBE_GLOBAL = ("--kubeconfig=", "--context=", "--cluster=", "--user=", "-n= --namespace=",
                "-s= --server=", "--request-timeout=", "--insecure-skip-tls-verify=?",
                "--tls-server-name=", "--certificate-authority=", "--client-certificate=",
                "--client-key=", "--token=", "--as=", "--as-group=", "--as-uid=",
                "-v= --v=", "--match-server-version=?", "--disable-compression=?",
                "--cache-dir=", "--profile=", "--profile-output=", "--warnings-as-errors=?",
                "--log-flush-frequency=")
_KUBE_NO_WRITE = {"kubeconfig": "kubectl --kubeconfig loads a configuration that can run a "
                                "program (users[].user.exec); the kit gives kubectl a copy of "
                                "your kubeconfig without exec or auth-provider plugins",
                  "cache-dir": "kubectl --cache-dir writes where the kit said nothing may be "
                               "written",
                  "profile-output": "kubectl --profile-output writes a file",
                  "profile": "kubectl --profile writes a profile file",
                  **dict.fromkeys(("server", "insecure-skip-tls-verify", "tls-server-name",
                                   "certificate-authority"),
                                  "kubectl sends your kubeconfig's credentials to the server "
                                  "it reaches: only the clusters your kubeconfig names, "
                                  "verified as it says (--context/--cluster choose one)")}
_GET = ("-o= --output=", "-A --all-namespaces=?", "-l= --selector=", "--field-selector=",
        "--sort-by=", "--show-labels=?", "--show-kind=?", "--no-headers=?", "-L= --label-columns=",
        "--chunk-size=", "--ignore-not-found=?", "-f= --filename=", "-R --recursive=?",
        "-k= --kustomize=", "--template=", "--allow-missing-template-keys=?",
        "--output-watch-events=?", "--server-print=?", "--show-managed-fields=?", "--raw=",
        "--subresource=", "-w --watch=?", "--watch-only=?")
_KUBE_PLUGINS = {"kustomize": "kubectl -k builds a kustomization (plugins, remote bases)"}
_KUBE_FOLLOW = {"watch": "kubectl --watch never ends", "watch-only": "kubectl --watch never ends",
                "follow": "kubectl logs -f never ends"}


def _kube(name: str, *options: str) -> object:
    """A kubectl subcommand: the global flags, its own, and the refusals that apply to them."""
    plain = grammar(f"kubectl {name}", *_KUBE_GLOBAL, *options)
    shorts, longs = plain.table()
    keys = {o.key for o in (*shorts.values(), *longs.values())}
    refuse = {k: v for k, v in {**_KUBE_NO_WRITE, **_KUBE_FOLLOW, **_KUBE_PLUGINS}.items()
              if k in keys}
    return grammar(f"kubectl {name}", *_KUBE_GLOBAL, *options, network=True, refuse=refuse)


KUBECTL = Subcommands(
    "kubectl", grammar("kubectl", *_KUBE_GLOBAL, "-h --help", "--version=?", posix=True,
                       network=True, refuse=_KUBE_NO_WRITE),
    subs={
        "get": _kube("get", *_GET),  # type: ignore[dict-item]
        "describe": _kube("describe", "-A --all-namespaces=?", "-l= --selector=",
                          "--show-events=?", "--chunk-size=", "-f= --filename=",
                          "-R --recursive=?", "-k= --kustomize="),
        "logs": _kube("logs", "-c= --container=", "--all-containers=?", "-p --previous=?",
                      "--since=", "--since-time=", "--tail=", "--timestamps=?",
                      "--limit-bytes=", "-l= --selector=", "--prefix=?", "--max-log-requests=",
                      "--pod-running-timeout=", "--ignore-errors=?", "-f --follow=?",
                      "--insecure-skip-tls-verify-backend=?", "--all-pods=?"),
        "events": _kube("events", "-A --all-namespaces=?", "--for=", "--types=",
                        "-o= --output=", "--chunk-size=", "--no-headers=?",
                        "--show-managed-fields=?", "--template=",
                        "--allow-missing-template-keys=?", "-w --watch=?"),
        "version": _kube("version", "--client=?", "-o= --output="),
        "api-resources": _kube("api-resources", "--api-group=", "--cached=?",
                               "--namespaced=?", "--no-headers=?", "-o= --output=",
                               "--sort-by=", "--verbs="),
        "cluster-info": _kube("cluster-info"),
    },
    refused={s: f"kubectl {s} changes the cluster or reaches into a container" for s in (
        "apply", "create", "delete", "edit", "patch", "replace", "scale", "autoscale",
        "rollout", "set", "label", "annotate", "expose", "run", "exec", "attach", "cp",
        "port-forward", "proxy", "cordon", "uncordon", "drain", "taint", "debug", "certificate",
        "auth", "config", "plugin", "kustomize", "wait")},
    bare_ok=False)

TOOLS: dict[str, Entry] = {"sacct": SACCT, "squeue": SQUEUE, "sinfo": SINFO,
                           "scontrol": SCONTROL, "kubectl": KUBECTL}  # type: ignore[dict-item]

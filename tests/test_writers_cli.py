"""`gpulens recommend` as a user runs it: the real CLI in a subprocess, against FakeKubernetesApi."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.fakes.kubernetes_api import FakeKubernetesApi
from tests.support.cli import assert_one_line_error, gpulens
from tests.support.recommend_cluster import (
    CQ_V1BETA2,
    RQ_PATH,
    build_writer_store,
    live_cluster_queue,
    live_resource_quota,
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_writer_store(tmp_path_factory.mktemp("cli") / "store.duckdb")


def test_a_dry_run_explains_prints_a_diff_per_object_and_writes_yaml(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "recs"
    proc = gpulens("recommend", "--db", str(store), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "--- ClusterQueue team-a (now)" in text and "+++ ClusterQueue team-a (proposed)" in text
    assert "-        nominalQuota: 16" in text and "+        nominalQuota: 12" in text
    assert "-    requests.nvidia.com/gpu: '8'" in text and "+    requests.nvidia.com/gpu: '6'" in text
    assert "refused, low confidence" in text  # team-c
    assert "pending" in text and "confidence" in text
    assert "dry run: nothing applied" in text
    body = yaml.safe_load((out / "clusterqueue-team-a.yaml").read_text())
    assert body["metadata"]["annotations"]["gpulens.io/applied-to"] == '{"h100/nvidia.com/gpu": 12}'


def test_apply_patches_through_the_kubeconfig(store: Path, tmp_path: Path) -> None:
    with FakeKubernetesApi() as fake:
        for name in ("team-a", "team-b", "team-c"):
            fake.put(f"{CQ_V1BETA2}/{name}", live_cluster_queue(name))
        fake.put(RQ_PATH, live_resource_quota())
        proc = gpulens("recommend", "--db", str(store), "--out", str(tmp_path / "o"), "--apply",
                       "--kubeconfig", str(fake.kubeconfig(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    assert "=> APPLIED: h100/nvidia.com/gpu 16 -> 12" in proc.stdout
    assert "=> REFUSED" in proc.stdout
    patched = {r.path for r in fake.requests_to("PATCH")}
    assert {f"{CQ_V1BETA2}/team-a", f"{CQ_V1BETA2}/team-b", RQ_PATH} <= patched
    assert f"{CQ_V1BETA2}/team-c" not in patched


def test_a_403_is_one_clear_line_and_exit_2(store: Path, tmp_path: Path) -> None:
    with FakeKubernetesApi() as fake:
        fake.put(RQ_PATH, live_resource_quota())
        fake.fail("PATCH", RQ_PATH, 403, 'resourcequotas "gpu-quota" is forbidden: User "bob" cannot patch')
        proc = gpulens("recommend", "--db", str(store), "--target", "resourcequota", "--out", str(tmp_path / "o"),
                       "--apply", "--kubeconfig", str(fake.kubeconfig(tmp_path)))
    assert_one_line_error(proc, "forbidden", "ResourceQuota ns-c/gpu-quota", 'User "bob" cannot patch', "deploy/rbac/")


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (("--db", "/nonexistent/store.duckdb"), ("no store at /nonexistent/store.duckdb",)),
        (("--target", "volcano"), ("invalid --target 'volcano'", "kueue", "resourcequota")),
        (("--max-step", "-5"), ("--max-step: must be more than 0 %",)),
        (("--kueue-version", "v2"), ("unsupported Kueue API version 'v2'",)),
    ],
)
def test_bad_input_is_one_line(store: Path, tmp_path: Path, args: tuple[str, ...], fragments: tuple[str, ...]) -> None:
    full = ("--db", str(store), *args) if args[0] != "--db" else args
    assert_one_line_error(gpulens("recommend", *full, "--out", str(tmp_path)), *fragments)


def test_apply_without_a_reachable_cluster_is_one_line(store: Path, tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "x", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}],
    }))
    proc = gpulens("recommend", "--db", str(store), "--out", str(tmp_path / "o"), "--apply", "--kubeconfig", str(config))
    assert_one_line_error(proc, "cannot reach the API server http://127.0.0.1:9")


def test_a_kubeconfig_that_is_not_yaml_is_one_line(store: Path, tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text("clusters: [unclosed\n  - server: {\n")
    proc = gpulens("recommend", "--db", str(store), "--out", str(tmp_path / "o"), "--apply", "--kubeconfig", str(config))
    assert_one_line_error(proc, f"cannot load kubeconfig {config}")


def test_help_explains_the_guard_rails() -> None:
    proc = gpulens("recommend", "--help")
    assert proc.returncode == 0
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", proc.stdout).split()).lower()
    for fragment in ("--apply", "--kubeconfig", "--target", "--no-store", "auto-apply", "server-side apply",
                     "dry run by default", "low-confidence changes are refused"):
        assert fragment in text


def test_no_store_leaves_the_store_untouched(tmp_path: Path) -> None:
    import duckdb

    store = build_writer_store(tmp_path / "fresh.duckdb")
    proc = gpulens("recommend", "--db", str(store), "--no-store", "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    with duckdb.connect(str(store), read_only=True) as con:
        tables = {r[0] for r in con.execute("SHOW TABLES").fetchall()}
    assert "recommendations" not in tables


def test_a_hang_on_one_write_makes_it_uncertain_the_others_apply_and_the_exit_is_non_zero(
    store: Path, tmp_path: Path
) -> None:
    with FakeKubernetesApi() as fake:
        for name in ("team-a", "team-b", "team-c"):
            fake.put(f"{CQ_V1BETA2}/{name}", live_cluster_queue(name))
        fake.put(RQ_PATH, live_resource_quota())
        fake.hang("PATCH", f"{CQ_V1BETA2}/team-a", 5.0)
        proc = gpulens("recommend", "--db", str(store), "--out", str(tmp_path / "o"), "--apply",
                       "--request-timeout", "1s", "--kubeconfig", str(fake.kubeconfig(tmp_path)))
        recorded = set(fake.objects)
    assert_one_line_error(proc, "1 of 4 object(s) may have been applied", "ClusterQueue team-a",
                          "no answer within 1 s")
    assert "cannot reach" not in proc.stderr
    assert "Outcome per object (2 applied, 0 unchanged, 0 skipped, 1 refused, 0 failed, 1 unknown)" in proc.stdout
    assert "apply: 2 applied, 0 unchanged, 0 skipped, 1 refused, 0 failed, 1 unknown" in proc.stdout
    assert "=> APPLIED: nvidia.com/gpu 8 -> 6" in proc.stdout  # the ResourceQuota after the hung object
    cr = "/apis/gpulens.io/v1alpha1/namespaces/gpulens/gpuquotarecommendations"
    assert {f"{cr}/clusterqueue-team-a", f"{cr}/clusterqueue-team-b"} <= recorded


def test_request_timeout_must_be_a_duration(store: Path, tmp_path: Path) -> None:
    proc = gpulens("recommend", "--db", str(store), "--out", str(tmp_path / "o"), "--apply", "--request-timeout", "soon")
    assert_one_line_error(proc, "--request-timeout")

"""`--engine ray`: a real local Ray cluster (started and shut down by the command) with 2 CPU actors gives the
local engine's exports on the same inputs, and the same manifest statuses. Exports are compared with
test_cli.assert_same_exports (same files; float tolerances stated there: the actors run 1 torch thread
each and other batches than the local run, so the last float bits may differ)."""

import pytest
from test_cli import (
    CORRUPT,
    IMAGE_TASKS,
    IMAGES,
    assert_same_exports,
    by_name,
    cli_args,
    make_dataset,
    run_cli,
    this_run,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Ray Data's own, about its settings


@pytest.fixture()
def no_ray_left():
    yield
    import ray

    if ray.is_initialized():  # the command shuts its cluster down; this only guards against a failure
        ray.shutdown()


def test_ray_engine_gives_the_local_engines_exports(tiny_dir, tmp_path, no_ray_left):
    import ray

    images = IMAGES[:5]  # includes both astronaut.jpg
    data = make_dataset(tmp_path / "data", images=images, video=False)
    local, distributed = tmp_path / "local", tmp_path / "ray"
    code, stdout, _ = run_cli(cli_args(tiny_dir, [data], local, "--tasks", "all", "--batch-size", 2, "-q"))
    assert code == 1 and "5 ok, 1 failed, 0 skipped" in stdout

    code, stdout, stderr = run_cli(cli_args(tiny_dir, [data], distributed, "--tasks", "all", "--batch-size", 2,
                                            "--engine", "ray", "--workers", 2, "-q"))
    assert code == 1 and "5 ok, 1 failed, 0 skipped" in stdout, stderr
    assert not ray.is_initialized()  # the local cluster was shut down at the end of the run

    ray_records, local_records = (by_name(this_run(out / "manifest.jsonl"), data) for out in (distributed, local))
    assert {name: (r.status, r.error, r.outputs) for name, r in ray_records.items()} == {
        name: (r.status, r.error, r.outputs) for name, r in local_records.items()}
    assert ray_records[CORRUPT].status == "failed" and "not a supported image" in ray_records[CORRUPT].error
    assert len(ray_records) == len(images) + 1
    assert_same_exports(local, distributed, IMAGE_TASKS)

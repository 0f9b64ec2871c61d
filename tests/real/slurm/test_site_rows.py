"""Each named site's row (mpiray/host/sites.py), applied by `--site NAME` in a dry run on a test-bed host shaped
like that site's nodes: hsn0 beside eth0 (its hostname resolving to eth0), the site's GPUs bound as its
scheduler or binding script binds them, their count faked for Ray's vendor libraries (tests/hooks/fake_gpus).
The site's own address rule names hosts of the site (x3004c0s1b0n0.hsn.cm.polaris...), so on the test bed the
user's MPIRAY_ADDRESS_RULE stands in for it, which also shows that a user's setting wins over the row."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from mpiray.host import sites

from helpers import BIN, JOB_TIMEOUT_S, JOBS, PYTHON, ROOT, START_RAY, driver_report, new_job_id, rank_events

HOOKS = ROOT / "tests" / "hooks" / "fake_gpus"
SHAPES = {  # what the site's nodes put in a rank's environment, per vendor
    "amd": {"FAKE_AMD_GPUS": "8", **dict.fromkeys(("ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES",
                                                     "GPU_DEVICE_ORDINAL"), "0,1,2,3,4,5,6,7")},
    "intel": {"FAKE_INTEL_GPUS": "12", "ZE_FLAT_DEVICE_HIERARCHY": "FLAT"},
    "nvidia": {"CUDA_VISIBLE_DEVICES": "0,1,2,3"},
    "auto": {},
}


@pytest.mark.parametrize("site", sites.SITES, ids=[site.name for site in sites.SITES])
def test_each_sites_job_script_names_its_row(site):
    script = (JOBS / site.job_script).read_text()
    default = re.search(r"MPIRAY_SITE=\$\{MPIRAY_SITE-(\$site|[\w-]+)\}", script)  # what the script sets
    assert default, site.job_script
    chosen = re.findall(r"site=([\w-]+)", script) if default.group(1) == "$site" else [default.group(1)]
    assert site.name in chosen, (site.job_script, chosen)


@pytest.mark.parametrize("site", sites.SITES, ids=[site.name for site in sites.SITES])
def test_a_dry_run_on_a_node_shaped_like_the_sites_applies_its_row(slurm_testbed, tmp_path, site):
    node = slurm_testbed.nodes[0]
    job_id = new_job_id(site.name)
    env = {**os.environ, **SHAPES[site.gpu_vendor], "MPIRAY_SITE": site.name,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(HOOKS), os.environ.get("PYTHONPATH")]))}
    if site.address_rule:
        env["MPIRAY_ADDRESS_RULE"] = "{host}.hsn.testbed"
    argv = node.command([str(BIN / "mpirun"), "-np", "2", PYTHON, str(START_RAY), "--dry-run", "--log-dir",
                         str(tmp_path / "logs"), "--job-id", job_id, "--", PYTHON, "-c", "pass"])
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"pre-flight: site {site.name} (" in result.stdout
    planned = [next(r["fields"] for r in rank_events(tmp_path / "logs" / job_id, rank) if r["event"] == "dry_run_node")
               for rank in range(2)]
    for node_plan in planned:  # every node on the fast network, never on the management one
        assert f"--node-ip-address={node.hsn_ip}" in node_plan["argv"], node_plan["argv"]
    gpus = sum(int(arg.partition("=")[2]) for plan in planned for arg in plan["argv"] if arg.startswith("--num-gpus="))
    assert gpus == site.gpus_per_node


GPU_REQUESTS = {  # each form a site's pages give for 2 Kestrel GPU nodes of 4 H100s (the test bed's GRES)
    "gres": ["--gres=gpu:h100:4"], "gpus-per-node": ["--gpus-per-node=4"], "typed": ["--gpus-per-node=h100:4"],
    "gpus": ["--gpus=8"], "G": ["-G", "8"],
}


def submit_kestrel(jobs, tmp_path, env: dict[str, str], request: list[str]) -> tuple[str, str]:
    """jobs/slurm_kestrel.sh under sbatch on 2 test-bed nodes with the GPU request; (job id, its output)."""
    job_id = jobs.submit(JOBS / "slurm_kestrel.sh", tmp_path, env, "-N", "2", "--cpus-per-task=2", *request)
    result = jobs.bed.wait_for_job(job_id, timeout=JOB_TIMEOUT_S)
    output = (tmp_path / f"{jobs.name}-{job_id}.out").read_text()
    assert (result.state, result.exit_code) == ("COMPLETED", 0), output[-3000:]
    return job_id, output


@pytest.mark.parametrize("request_form", GPU_REQUESTS.values(), ids=GPU_REQUESTS.keys())
def test_kestrels_script_gives_the_trainer_every_gpu_however_they_were_asked_for(slurm_testbed, jobs, tmp_path,
                                                                                 request_form):
    """Its dry run (the script's usage line) under sbatch, as Slurm sets each request's variables: the trainer the
    script runs gets a GPU learner per GPU of the job, every node offers Ray its 4, on the site's GPU row."""
    env = jobs.env(tmp_path, [], MPIRAY_DRY_RUN="1")
    del env["MPIRAY_DRIVER"]  # the script's own: the trainer
    job_id, output = submit_kestrel(jobs, tmp_path, env, request_form)
    assert "2 CPUs and 4 GPUs each, site kestrel-gpu" in output
    job_dir = tmp_path / "logs" / job_id
    (driver,) = [r["fields"]["command"] for r in rank_events(job_dir, 0) if r["event"] == "dry_run"]
    assert "--num-gpus 8 " in driver + " ", driver
    for rank in range(2):
        (plan,) = [r["fields"]["argv"] for r in rank_events(job_dir, rank) if r["event"] == "dry_run_node"]
        assert "--num-gpus=4" in plan, plan
    jobs.wait_until_gone(job_id)


GPU_PROBE = "import json, ray; ray.init(); print('GPUS', json.dumps(ray.cluster_resources().get('GPU', 0)))"


def test_kestrels_script_asked_with_gres_starts_a_ray_cluster_with_every_gpu(slurm_testbed, jobs, tmp_path):
    """NREL's form, --gres=gpu:h100:4, for real: Slurm binds each node's 4 (CUDA_VISIBLE_DEVICES), Ray's own
    NVIDIA code accepts them, and the driver sees the cluster's 8."""
    job_id, output = submit_kestrel(jobs, tmp_path, jobs.env(tmp_path, [PYTHON, "-c", GPU_PROBE]),
                                    GPU_REQUESTS["gres"])
    assert driver_report(output, "GPUS") == 8
    jobs.wait_until_gone(job_id)

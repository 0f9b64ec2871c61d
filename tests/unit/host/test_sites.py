"""Named sites (host/sites.py) and the address rule (host/network.py): a row applied to what the user left unset."""

import socket

import pytest

from mpiray.config import Config
from mpiray.errors import ConfigError
from mpiray.host import network, sites
from mpiray.options import parse_args

NAMED = ("kestrel", "kestrel-gpu", "polaris", "aurora", "frontier", "perlmutter", "lumi", "alps")


def test_every_named_site_has_a_row_with_its_network_its_sources_and_a_job_script():
    assert set(NAMED) <= set(sites.BY_NAME)
    for site in sites.SITES:
        assert bool(site.interface) != bool(site.address_rule), site.name  # one network choice
        assert site.sources and site.job_script and site.scheduler in ("slurm", "pbs"), site.name


def test_a_site_fills_what_the_user_left_unset_and_nothing_else():
    polaris = parse_args(["--site", "polaris", "--", "true"], {})
    assert (polaris.address_rule, polaris.interface, polaris.gpu_vendor) == \
        ("{host}.hsn.cm.polaris.alcf.anl.gov", None, "nvidia")
    own = parse_args(["--site", "polaris", "--interface", "ib0", "--gpu-vendor", "amd", "--", "true"], {})
    assert (own.interface, own.address_rule, own.gpu_vendor) == ("ib0", None, "amd")
    by_variable = parse_args(["--", "true"], {"MPIRAY_SITE": "frontier"})
    assert (by_variable.interface, by_variable.gpu_vendor) == ("hsn0", "amd")
    assert sites.apply(Config()) == Config()


def test_kestrel_is_slingshot_not_infiniband():
    assert sites.BY_NAME["kestrel"].interface == sites.BY_NAME["kestrel-gpu"].interface == "hsn0"


@pytest.mark.parametrize("argv, words", [
    (["--site", "nowhere"], "invalid choice"),
    (["--address-rule", "{node}.hsn"], "{node}"),
    (["--address-rule", "hsn.example.org"], "no hostname"),
    (["--interface", "hsn0", "--address-rule", "{host}i"], "not both"),
])
def test_bad_site_settings_say_what_to_give(argv, words):
    with pytest.raises(ConfigError, match=".*".join(map(lambda w: w.replace("{", r"\{").replace("}", r"\}"), [words]))):
        parse_args([*argv, "--", "true"], {})


def test_required_directives_reach_worker_jobs_unless_the_template_sets_the_resource():
    polaris = sites.BY_NAME["polaris"]
    assert sites.missing_directives(polaris, "pbs", ()) == ("#PBS -l filesystems=home:eagle",)
    assert sites.missing_directives(polaris, "pbs", ("#PBS -l filesystems=home:grand",)) == ()
    assert sites.missing_directives(polaris, "slurm", ()) == ()
    assert sites.missing_directives(None, "pbs", ()) == ()


def test_an_address_rule_names_each_host_by_its_short_name():
    assert network.rule_name("{host}.hsn.cm.polaris.alcf.anl.gov", "x3004c0s1b0n0.hostmgmt") == \
        "x3004c0s1b0n0.hsn.cm.polaris.alcf.anl.gov"
    assert network.rule_name("{host}i", "jwb0001.juwels") == "jwb0001i"
    assert network.rule_name("{hostname}-hsn", "n1.cluster") == "n1.cluster-hsn"


def test_an_address_rule_resolves_to_an_address_of_this_host():
    assert network.address_by_rule("localhost") == "127.0.0.1"  # no field: the name as written
    with pytest.raises(ConfigError, match=rf"{socket.gethostname()}.*does not resolve"):
        network.address_by_rule("{host}.no-such-name.invalid")

"""`simulator collective --nvlink-domain-nodes`: the scenario's system.nvlink_domain_nodes on the command line."""

import json

from simulator.collectives.place import placement_for_profile


def run(cli, *extra):
    return cli("collective", "--system", "gb200_nvl72", "--op", "all_reduce", "--ranks", 128, "--gpus-per-node", 4,
               "--bytes", "1GiB", "--json", *extra)


def test_sixteen_of_eighteen_trays_places_two_racks_of_64(cli):
    # 128 ranks at 4 per tray are 32 trays: not whole 18-tray racks, but two racks of 16 trays in use
    code, _, err = run(cli)
    assert code == 2 and "do not fill whole NVLink domains of 18 nodes" in err
    code, out, err = run(cli, "--nvlink-domain-nodes", "16")
    assert code == 0, err
    placement = placement_for_profile("gb200_nvl72", 128, 4, domain_nodes=16)
    assert placement.n_nodes == 2  # a multi-node NVLink domain is one "node" of the group: two racks
    assert json.loads(out)[0]["time_us"] > 0


def test_domain_size_is_validated(cli):
    code, _, err = run(cli, "--nvlink-domain-nodes", "40")
    assert code == 2 and "system.nvlink_domain_nodes: 40 nodes per NVLink domain: a gb200_nvl72 domain has 2 to 18" in err
    code, _, err = cli("collective", "--system", "dgx_h100", "--op", "all_reduce", "--ranks", 16, "--bytes", "1MiB",
                       "--nvlink-domain-nodes", "2")
    assert code == 2 and "dgx_h100 has no multi-node NVLink domain" in err

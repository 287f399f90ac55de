"""A Service's IP family fields as kube-apiserver settles them on a cluster of one or two service
ranges: `ipFamilyPolicy`, `ipFamilies`, `clusterIPs`. Pure (a test double: never a product path).

What kube-apiserver does, in its order (pkg/apis/core/validation, ValidateServiceClusterIPsRelatedFields
and validateUpgradeDowngrade*; pkg/registry/core/service/storage/alloc.go, initIPFamilyFields):

- `clusterIP` and `clusterIPs` are kept in step (`normalize`): either one given fills the other;
- the fields alone: `clusterIPs[0]` equals `clusterIP`, at most two addresses of different families,
  `None` only alone, `ipFamilies` IPv4/IPv6 without duplicates, each address of its `ipFamilies` entry's
  family, the policy one of SingleStack, PreferDualStack, RequireDualStack (`check_fields`);
- an update never changes the primary address or family, and releases the secondary only with the
  policy SingleStack (`check_change`);
- the policy defaults to the old object's, else RequireDualStack for a headless Service without a
  selector, else SingleStack; SingleStack with two addresses or families is refused; the families
  follow the addresses; a family the cluster has no range for is refused, as is RequireDualStack on
  a single-stack cluster; no family means the cluster's primary one, and PreferDualStack or
  RequireDualStack on a dual-stack cluster adds the other (`settle`). A headless Service without a
  selector may name both families on any cluster.

Every refusal is a `(field path, detail)` pair in kube-apiserver's words; the caller joins them into
one 422 as kube-apiserver does.
"""

from __future__ import annotations

from ipaddress import ip_address
from typing import Any

JSON = dict[str, Any]
Problem = tuple[str, str]  # (field path, detail)
IPV4, IPV6 = "IPv4", "IPv6"
SINGLE, PREFER, REQUIRE = "SingleStack", "PreferDualStack", "RequireDualStack"
POLICIES = (PREFER, REQUIRE, SINGLE)


def family_of(ip: str) -> str | None:
    try:
        return IPV6 if ip_address(ip).version == 6 else IPV4
    except ValueError:
        return None


def other(family: str) -> str:
    return IPV6 if family == IPV4 else IPV4


def go_list(values: list[Any], kind: str = "string") -> str:
    """A Go slice as kube-apiserver's messages print it: `[]string{"a", "b"}`."""
    return f"[]{kind}{{" + ", ".join(f'"{v}"' for v in values) + "}"


def invalid(path: str, value: str, why: str) -> Problem:
    return path, f"Invalid value: {value}: {why}"


def headless(spec: JSON) -> bool:
    return list(spec.get("clusterIPs") or []) == ["None"]


def normalize(spec: JSON, old: JSON | None) -> None:
    """clusterIP ↔ clusterIPs[0] (strategy.go, normalizeClusterIPs)."""
    ip, ips = spec.get("clusterIP") or "", list(spec.get("clusterIPs") or [])
    old_ips = list((old or {}).get("clusterIPs") or [])
    if ip and not ips:
        spec["clusterIPs"] = [ip]
    elif ips and not ip:
        spec["clusterIP"] = ips[0]
    elif old is not None and ip and ips == old_ips and ip != (old or {}).get("clusterIP"):
        spec["clusterIPs"] = [ip, *ips[1:]]  # only clusterIP changed: it is the primary


def check_fields(spec: JSON) -> list[Problem]:
    ip, ips, fams = spec.get("clusterIP") or "", list(spec.get("clusterIPs") or []), list(spec.get("ipFamilies") or [])
    out: list[Problem] = []
    if ip and ips and ips[0] != ip:
        out.append(invalid("spec.clusterIPs", go_list(ips), "first value must match `clusterIP`"))
    for i, fam in enumerate(fams):
        if fam not in (IPV4, IPV6):
            out.append((f"spec.ipFamilies[{i}]", f'Unsupported value: "{fam}": supported values: "IPv4", "IPv6"'))
        if fam in fams[:i]:
            out.append((f"spec.ipFamilies[{i}]", f'Duplicate value: "{fam}"'))
    policy = spec.get("ipFamilyPolicy")
    if policy is not None and policy not in POLICIES:
        out.append(("spec.ipFamilyPolicy", f'Unsupported value: "{policy}": supported values: '
                                           + ", ".join(f'"{p}"' for p in POLICIES)))
    bad_ip = False
    for i, each in enumerate(ips):
        if i == 0 and each == "None":
            if len(ips) > 1:
                bad_ip = True
                out.append(invalid("spec.clusterIPs", go_list(ips), "'None' must be the first and only value"))
        elif family_of(each) is None:
            bad_ip = True
            out.append(invalid(f"spec.clusterIPs[{i}]", f'"{each}"',
                               "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"))
    if len(ips) > 2:
        out.append(invalid("spec.clusterIPs", go_list(ips), "may only hold up to 2 values"))
    if bad_ip:
        return out
    if len(ips) > 1 and len({family_of(i) for i in ips}) != len(ips):
        out.append(invalid("spec.clusterIPs", go_list(ips), "may specify no more than one IP for each IP family"))
    if not headless(spec):
        for i, (each, fam) in enumerate(zip(ips, fams, strict=False)):
            if fam in (IPV4, IPV6) and family_of(each) != fam:
                out.append(invalid(f"spec.clusterIPs[{i}]", f'"{each}"',
                                   f"expected an {fam} value as indicated by `ipFamilies[{i}]`"))
    return out


def check_change(spec: JSON, old: JSON) -> list[Problem]:
    """An update may add the secondary address and family, or release it with SingleStack; never
    change the primary ones (validateUpgradeDowngradeClusterIPs/IPFamilies)."""
    if "ExternalName" in (spec.get("type"), old.get("type")) or (headless(spec) and headless(old)):
        return []
    out: list[Problem] = []
    for what, kind in (("clusterIPs", "string"), ("ipFamilies", "core.IPFamily")):
        new_v, old_v = list(spec.get(what) or []), list(old.get(what) or [])
        if what == "ipFamilies" and headless(spec) != headless(old):
            continue
        shown = go_list(new_v, kind)
        if len(new_v) == len(old_v):
            out += [invalid(f"spec.{what}[{i if what == 'clusterIPs' else 0}]", shown, "may not change once set")
                    for i, (a, b) in enumerate(zip(old_v, new_v, strict=True)) if a != b]
            continue
        if new_v and old_v and new_v[0] != old_v[0]:
            out.append(invalid(f"spec.{what}[0]", shown, "may not change once set"))
        if len(old_v) > len(new_v) and not spec.get("clusterIPs"):  # (the addresses, also for families)
            out.append(invalid(f"spec.{what}[0]", shown,
                               f"primary {'clusterIP' if what == 'clusterIPs' else 'ipFamily'} can not be unset"))
        if len(old_v) > len(new_v) == 1 and spec.get("ipFamilyPolicy") != SINGLE:
            which = "clusterIP" if what == "clusterIPs" else "ipFamily"
            out.append(invalid("spec.ipFamilyPolicy", _policy(spec),
                               f"must be set to 'SingleStack' when releasing the secondary {which}"))
    return out


def _policy(spec: JSON) -> str:
    policy = spec.get("ipFamilyPolicy")
    return f'"{policy}"' if policy else "null"


def settle(spec: JSON, old: JSON | None, families: tuple[str, ...]) -> list[Problem]:
    """initIPFamilyFields: fill in the policy and families of a Service that needs a cluster IP on a
    cluster whose service ranges are of `families` (primary first); [] when it is acceptable."""
    if spec.get("ipFamilyPolicy") is None:
        old_policy = (old or {}).get("ipFamilyPolicy")
        selectorless_headless = spec.get("clusterIP") == "None" and not spec.get("selector")
        spec["ipFamilyPolicy"] = old_policy or (REQUIRE if selectorless_headless else SINGLE)
    problems = check_fields(spec)
    if problems:
        return problems
    problems = _downgrade(spec, old) + _single_stack(spec) + _infer_families(spec, families)
    if problems:
        return problems
    fams: list[str] = spec.setdefault("ipFamilies", [])
    if spec.get("clusterIP") == "None" and not spec.get("selector"):
        if not fams:
            fams.append(families[0])
        if len(fams) < 2 and spec["ipFamilyPolicy"] != SINGLE:
            fams.append(other(fams[0]))
        return []
    if spec["ipFamilyPolicy"] == REQUIRE and len(families) < 2:
        problems.append(invalid("spec.ipFamilyPolicy", _policy(spec),
                                "this cluster is not configured for dual-stack services"))
    problems += [invalid(f"spec.ipFamilies[{i}]", f'"{fam}"', "not configured on this cluster")
                 for i, fam in enumerate(fams) if fam not in families]
    if problems:
        return problems
    if not fams:
        fams.append(families[0])
    if spec["ipFamilyPolicy"] != SINGLE and len(fams) == 1 and len(families) == 2:
        fams.append(other(fams[0]))
    return []


def _downgrade(spec: JSON, old: JSON | None) -> list[Problem]:
    if old is None:
        return []
    ips, fams = list(spec.get("clusterIPs") or []), list(spec.get("ipFamilies") or [])
    if spec["ipFamilyPolicy"] == SINGLE:  # clear intent: what is unchanged loses its secondary
        if ips == list(old.get("clusterIPs") or []) and len(ips) > 1:
            spec["clusterIPs"] = ips[:1]
        if fams == list(old.get("ipFamilies") or []) and len(fams) > 1:
            spec["ipFamilies"] = fams[:1]
        return []
    out = []
    if 0 < len(ips) < len(old.get("clusterIPs") or []):  # (left out: kept, not reduced)
        out.append(invalid("spec.ipFamilyPolicy", _policy(spec), "must be 'SingleStack' to release the "
                                                                  "secondary cluster IP"))
    if 0 < len(fams) < len(old.get("ipFamilies") or []):
        out.append(invalid("spec.ipFamilyPolicy", _policy(spec), "must be 'SingleStack' to release the "
                                                                  "secondary IP family"))
    return out


def _single_stack(spec: JSON) -> list[Problem]:
    if spec["ipFamilyPolicy"] != SINGLE:
        return []
    out = []
    if len(spec.get("clusterIPs") or []) == 2:
        out.append(invalid("spec.ipFamilyPolicy", _policy(spec), "must be 'RequireDualStack' or 'PreferDualStack' "
                                                                  "when multiple cluster IPs are specified"))
    if len(spec.get("ipFamilies") or []) == 2:
        out.append(invalid("spec.ipFamilyPolicy", _policy(spec), "must be 'RequireDualStack' or 'PreferDualStack' "
                                                                  "when multiple IP families are specified"))
    return out


def _infer_families(spec: JSON, families: tuple[str, ...]) -> list[Problem]:
    """Each address without an `ipFamilies` entry adds its family, if the cluster has it."""
    ips = list(spec.get("clusterIPs") or [])
    fams = spec.setdefault("ipFamilies", [])
    out: list[Problem] = []
    for i, ip in enumerate(ips):
        if ip == "None":
            break
        fam = family_of(ip)
        assert fam is not None  # check_fields passed
        if i >= len(fams):
            if fam in families:
                fams.append(fam)
            else:
                out.append(invalid(f"spec.clusterIPs[{i}]", go_list(ips), f"{fam} is not configured on this cluster"))
    return out

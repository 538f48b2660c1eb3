"""The network policy, pure: destinations parsed and refused, hosts and ports both checked,
IP literals only when listed, wildcards for subdomains only, a sub-agent's policy within its
orchestration's; the address check; the ClientHello reader; the response scrubber."""

from __future__ import annotations

import ssl

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.parent.egress.addresses import forbidden
from tether.parent.egress.policy import (
    NONE,
    Allowed,
    Credential,
    Denied,
    NetworkPolicy,
    credential_flag,
    destination_from_table,
    parse_destination,
    policy_of,
    with_credentials,
)
from tether.parent.egress.scrub import Scrubber
from tether.parent.egress.tls import NEED_MORE, client_hello_server_name


def allows(policy: NetworkPolicy, host: str, port: int) -> bool:
    return isinstance(policy.decide(host, port), Allowed)


def test_a_destination_without_a_port_means_443_and_the_port_is_checked_as_well() -> None:
    policy = policy_of(["pypi.org"])
    assert allows(policy, "pypi.org", 443)
    got = policy.decide("pypi.org", 80)
    assert isinstance(got, Denied) and "port 80 of pypi.org is not allowed" in got.reason
    assert not allows(policy, "pypi.org", 22)


def test_port_lists_and_ranges_allow_exactly_their_ports() -> None:
    policy = policy_of(["example.com:80,443", "example.net:8000-8100"])
    assert allows(policy, "example.com", 80) and allows(policy, "example.com", 443)
    assert not allows(policy, "example.com", 8080)
    assert allows(policy, "example.net", 8000) and allows(policy, "example.net", 8100)
    assert not allows(policy, "example.net", 7999) and not allows(policy, "example.net", 8101)


def test_a_wildcard_covers_subdomains_and_not_the_domain_itself_nor_look_alikes() -> None:
    policy = policy_of(["*.example.com"])
    assert allows(policy, "a.example.com", 443) and allows(policy, "a.b.example.com", 443)
    assert not allows(policy, "example.com", 443)
    assert not allows(policy, "badexample.com", 443)
    assert not allows(policy, "example.com.evil.net", 443)


def test_names_are_compared_in_lower_case_without_a_trailing_dot() -> None:
    policy = policy_of(["PyPI.org"])
    assert allows(policy, "pypi.ORG.", 443)


def test_an_ip_literal_passes_only_when_that_literal_is_listed() -> None:
    named = policy_of(["pypi.org", "*.example.com"])
    got = named.decide("151.101.0.223", 443)
    assert isinstance(got, Denied) and "IP address the network policy does not list" in got.reason
    listed = policy_of(["10.0.0.5:8080", "[2001:db8::1]"])
    assert allows(listed, "10.0.0.5", 8080)
    assert not allows(listed, "10.0.0.6", 8080) and not allows(listed, "10.0.0.5", 443)
    assert allows(listed, "[2001:db8::1]", 443) and allows(listed, "2001:DB8:0::1", 443)
    # An IPv4-mapped IPv6 form is the IPv4 address, listed or not.
    assert allows(listed, "::ffff:10.0.0.5", 8080)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "*",
        "*.com",
        "a.*.example.com",
        "ex*ample.com",
        "http://pypi.org",
        "pypi.org/simple",
        "pypi.org:",
        "pypi.org:0",
        "pypi.org:70000",
        "pypi.org:443-80",
        "pypi.org:http",
        "::1",
        "[not-an-ip]:443",
        "-bad.example.com",
        "a..b",
        "пример.рф",
        "1.2.3",
        "*.10.0.0.1",
    ],
)
def test_a_malformed_destination_is_refused_saying_what_is_wrong(text: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_destination(text)
    assert str(info.value)


def test_a_sub_agents_policy_is_within_its_orchestrations() -> None:
    outer = policy_of(["*.example.com", "pypi.org"])
    inner = outer.narrowed(["api.example.com", "other.org"])
    assert allows(inner, "api.example.com", 443)
    assert not allows(inner, "www.example.com", 443)  # outer allows, inner does not
    got = inner.decide("other.org", 443)  # inner allows, outer does not
    assert isinstance(got, Denied) and "orchestration" in got.reason
    assert outer.narrowed([]).none
    assert NONE.narrowed(["pypi.org"]).none
    assert inner.describe() == [
        "api.example.com:443",
        "other.org:443",
        *(f"within {d}" for d in outer.describe()),
    ]


@given(
    st.lists(st.sampled_from(["a.test", "*.b.test", "c.test:80", "d.test:1-100"]), max_size=4),
    st.lists(st.sampled_from(["a.test", "*.b.test", "c.test:80", "x.b.test:1-100"]), max_size=4),
    st.sampled_from(["a.test", "b.test", "x.b.test", "c.test", "d.test", "z.test"]),
    st.sampled_from([1, 80, 100, 443]),
)
def test_a_narrowed_policy_allows_exactly_what_both_allow(
    outer_entries: list[str], inner_entries: list[str], host: str, port: int
) -> None:
    outer = policy_of(outer_entries)
    inner = outer.narrowed(inner_entries)
    both = allows(outer, host, port) and allows(policy_of(inner_entries), host, port)
    assert allows(inner, host, port) == both


def test_a_credential_is_bound_to_its_destination_and_its_value_is_never_in_the_policy() -> None:
    token = Credential(env="EXAMPLE_TOKEN")
    policy = NetworkPolicy((parse_destination("api.example.com", token),))
    got = policy.decide("api.example.com", 443)
    assert isinstance(got, Allowed) and got.credential == token
    assert policy.credentials() == [token]
    assert policy.describe() == ["api.example.com:443 (adds Authorization: Bearer $EXAMPLE_TOKEN)"]
    assert policy.credential_hosts() == ["api.example.com"]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"env": "NOT A NAME"},
        {"env": "T", "header": "Host"},
        {"env": "T", "header": "Proxy-Authorization"},
        {"env": "T", "header": "bad header"},
        {"env": "T", "prefix": "x\r\nInjected: 1"},
    ],
)
def test_a_credential_that_would_frame_or_route_the_request_is_refused(
    kwargs: dict[str, str],
) -> None:
    with pytest.raises(ValueError):
        Credential(**kwargs)


def test_the_flags_and_the_table_form_build_the_same_allowlist() -> None:
    dest, cred = credential_flag("api.example.com=EXAMPLE_TOKEN")
    assert (dest, cred) == ("api.example.com", Credential(env="EXAMPLE_TOKEN"))
    _, raw = credential_flag("api.example.com:8443=X-Api-Key:KEY_VAR")
    assert raw == Credential(env="KEY_VAR", header="X-Api-Key", prefix="")
    entries = with_credentials(["pypi.org", "api.example.com"], [(dest, cred)])
    assert [str(e) for e in entries] == ["pypi.org:443", "api.example.com:443"]
    assert entries[1].credential == cred
    table = destination_from_table({"allow": "api.example.com", "credentialEnv": "EXAMPLE_TOKEN"})
    assert table == entries[1]
    with pytest.raises(ValueError, match="unknown key"):
        destination_from_table({"allow": "x.test", "token": "abc"})
    with pytest.raises(ValueError):
        credential_flag("no-equals-sign")


def test_policy_of_takes_none_a_policy_or_a_list_and_nothing_else() -> None:
    assert policy_of(None) is NONE and policy_of("none") is NONE
    assert policy_of(["pypi.org"]).describe() == ["pypi.org:443"]
    with pytest.raises(ValueError):
        policy_of("pypi.org")
    with pytest.raises(ValueError):
        policy_of([42])


# --- addresses ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("255.255.255.255", "broadcast"),
        ("198.51.100.7", "this host"),
    ],
)
def test_an_address_the_proxy_never_relays_to_is_named(address: str, why: str) -> None:
    got = forbidden(address, frozenset({"198.51.100.7"}))
    assert got is not None and why in got


@pytest.mark.parametrize("address", ["93.184.216.34", "10.1.2.3", "192.168.0.10", "2001:db8::5"])
def test_public_and_private_addresses_may_be_relayed_to(address: str) -> None:
    assert forbidden(address, frozenset()) is None


# --- the ClientHello reader -------------------------------------------------------------------


def hello(server_name: str | None) -> bytes:
    """A real ClientHello from Python's ssl, for `server_name`."""
    ctx = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname=server_name)
    if server_name is None:
        ctx.check_hostname = False
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


@pytest.mark.parametrize("name", ["pypi.org", "a.b.example.com", "Mixed.Case.Test"])
def test_the_server_name_of_a_real_client_hello_is_read(name: str) -> None:
    assert client_hello_server_name(hello(name)) == name.lower()


def test_a_hello_read_in_pieces_needs_more_until_its_record_is_whole() -> None:
    data = hello("pypi.org")
    for cut in (0, 1, 4, 5, 50, len(data) - 1):
        assert client_hello_server_name(data[:cut]) is NEED_MORE
    assert client_hello_server_name(data) == "pypi.org"


def test_what_is_no_client_hello_has_no_server_name() -> None:
    assert client_hello_server_name(b"GET / HTTP/1.1\r\n\r\n") is None
    assert client_hello_server_name(b"\x16\x03\x01\x00\x05\x02\x00\x00\x01\x00") is None


@given(st.binary(max_size=600))
def test_the_hello_reader_never_raises_on_any_bytes(data: bytes) -> None:
    got = client_hello_server_name(b"\x16\x03\x01" + data)
    assert got is None or got is NEED_MORE or isinstance(got, str)


# --- the scrubber -----------------------------------------------------------------------------


@given(
    st.binary(max_size=200),
    st.binary(max_size=200),
    st.lists(st.integers(min_value=1, max_value=50), max_size=10),
)
def test_a_secret_is_overwritten_wherever_reads_split_it_and_the_length_stays(
    before: bytes, after: bytes, cuts: list[int]
) -> None:
    secret = b"tok-s3cr3t-value"
    data = before + secret + after + secret
    scrubber = Scrubber([secret])
    out = b""
    rest = data
    for n in cuts:
        out += scrubber.feed(rest[:n])
        rest = rest[n:]
    out += scrubber.feed(rest) + scrubber.end()
    assert len(out) == len(data)
    assert secret not in out
    assert out.count(b"*" * len(secret)) >= 2

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planmap import units
from planmap.units import UnitError


@pytest.mark.parametrize("text,expected", [
    ("80GiB", 80 * 2**30), ("16GB", 16 * 10**9), ("512MiB", 512 * 2**20), (1024, 1024), ("1.5KiB", 1536),
    ("0", 0), ("12B", 12),
])
def test_bytes(text, expected):
    assert units.parse_bytes(text) == expected


@pytest.mark.parametrize("text,expected", [
    ("900GB/s", 900 * 10**9), ("400Gb/s", 50 * 10**9), ("400Gbps", 50 * 10**9), ("64GiB/s", 64 * 2**30),
    (1000, 1000),
])
def test_bandwidth(text, expected):
    assert units.parse_bandwidth(text) == expected


@pytest.mark.parametrize("text,expected", [
    ("989TFLOP/s", 989 * 10**12), ("67TFLOPS", 67 * 10**12), ("19.5TFLOP/s", 195 * 10**11), (2.5e12, 25 * 10**11),
])
def test_flops(text, expected):
    assert units.parse_flops(text) == expected


@pytest.mark.parametrize("text,expected", [
    ("2us", 2000), ("1.5ms", 1_500_000), ("60s", 60 * 10**9), ("10min", 600 * 10**9), (60, 60 * 10**9),
    ("2µs", 2000),
])
def test_duration(text, expected):
    assert units.parse_duration(text) == expected


@pytest.mark.parametrize("parser,text,fragment", [
    (units.parse_bytes, "80GB/s", "is a bandwidth, but a size is required"),
    (units.parse_bytes, "8Gb", "in bits"),
    (units.parse_bytes, "-5GiB", "must not be negative"),
    (units.parse_bandwidth, "80GiB", "is a size, but a bandwidth is required"),
    (units.parse_bandwidth, "0GB/s", "must be positive"),
    (units.parse_flops, "3ms", "is a duration, but a compute rate is required"),
    (units.parse_duration, "12 parsecs", "unknown duration unit"),
    (units.parse_duration, True, "boolean"),
    (units.parse_bytes, "lots", "is not a size"),
])
def test_errors_name_the_problem(parser, text, fragment):
    with pytest.raises(UnitError) as e:
        parser(text)
    assert fragment in str(e.value)
    assert e.value.expected


@pytest.mark.parametrize("parser,text,expected", [
    (units.parse_bytes, "80gb", 80 * 10**9), (units.parse_bytes, "80 GB", 80 * 10**9),
    (units.parse_bytes, "80gib", 80 * 2**30), (units.parse_bytes, "2 bytes", 2), (units.parse_bytes, "1 Kbyte", 1000),
    (units.parse_flops, "989 tflops", 989 * 10**12), (units.parse_flops, "989Tflop/s", 989 * 10**12),
    (units.parse_bandwidth, "400Gbit/s", 50 * 10**9), (units.parse_bandwidth, "400 gbit/s", 50 * 10**9),
    (units.parse_bandwidth, "400 Gb/s", 50 * 10**9), (units.parse_bandwidth, "400gbps", 50 * 10**9),
    (units.parse_bandwidth, "400GB/s", 400 * 10**9), (units.parse_bandwidth, "400gb/s", 400 * 10**9),
    (units.parse_bandwidth, "400 GBps", 400 * 10**9), (units.parse_bandwidth, "1 Tbits/s", 125 * 10**9),
    (units.parse_duration, "60S", 60 * 10**9), (units.parse_duration, "5 MIN", 300 * 10**9),
])
def test_units_are_case_insensitive_but_b_is_bits_after_an_uppercase_prefix(parser, text, expected):
    """Case does not matter except for b: "Gb/s" gigabits, "GB/s" gigabytes, all-lowercase "gb" bytes."""
    assert parser(text) == expected


@pytest.mark.parametrize("parser,text,fragment", [
    (units.parse_bytes, "8 Gbit", "in bits"), (units.parse_bytes, "8Mb", "in bits"),
    (units.parse_bytes, "80 gb/s", "is a bandwidth"), (units.parse_flops, "80 gb", "is a size"),
    (units.parse_bytes, "3 MS", "is a duration"),
])
def test_case_insensitive_units_still_reject_the_wrong_kind(parser, text, fragment):
    with pytest.raises(UnitError, match=fragment):
        parser(text)


def test_fraction():
    assert units.parse_fraction("10%") == pytest.approx(0.1)
    assert units.parse_fraction(0.25) == 0.25
    with pytest.raises(UnitError):
        units.parse_fraction("150%")


@given(st.text(max_size=20) | st.integers() | st.floats(allow_nan=True) | st.none())
def test_parsers_raise_only_unit_errors(value):
    for parser in (units.parse_bytes, units.parse_bandwidth, units.parse_flops, units.parse_duration,
                   units.parse_fraction):
        try:
            result = parser(value)
        except UnitError:
            continue
        assert isinstance(result, int | float)


def test_formatting():
    assert units.format_bytes(80 * 2**30) == "80GiB"
    assert units.format_duration(0.0012) == "1.2ms"
    assert units.format_rate(9.89e14, "FLOP/s") == "989TFLOP/s"

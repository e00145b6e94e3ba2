//! Command-line values written as Kubernetes components write them, so flags copied from
//! a kube-controller-manager or controller-runtime manifest mean the same here.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

/// A duration in Go's `time.ParseDuration` grammar: `0`, `300ms`, `1.5h`, `1h2m3s`,
/// `10us`, `500ns` (units `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`; an optional sign; every
/// number but a bare `0` needs a unit). Negative durations are refused: no flag takes one.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("invalid duration {text:?} (e.g. 300ms, 1.5h, 1h2m3s)");
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total_nanos: u128 = 0;
    while !rest.is_empty() {
        let integer_len = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let (integer, tail) = rest.split_at(integer_len);
        let (fraction, tail) = match tail.strip_prefix('.') {
            Some(after_dot) => {
                after_dot.split_at(after_dot.find(|c: char| !c.is_ascii_digit()).unwrap_or(after_dot.len()))
            }
            None => ("", tail),
        };
        if integer.is_empty() && fraction.is_empty() {
            return Err(invalid());
        }
        let unit_len = tail.find(|c: char| c == '.' || c.is_ascii_digit()).unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(format!("missing unit in duration {text:?} (ns, us, ms, s, m, h)")),
            _ => return Err(format!("unknown unit {unit:?} in duration {text:?} (ns, us, ms, s, m, h)")),
        };
        total_nanos = total_nanos.saturating_add(number_nanos(integer, fraction, unit_nanos).ok_or_else(invalid)?);
        rest = tail;
    }
    // Go's durations are i64 nanoseconds; anything longer is an overflow there too
    if total_nanos > i64::MAX as u128 {
        return Err(format!("duration {text:?} is too long"));
    }
    if negative && total_nanos > 0 {
        return Err(format!("duration {text:?} must not be negative"));
    }
    let secs = u64::try_from(total_nanos / 1_000_000_000).map_err(|_| invalid())?;
    let nanos = u32::try_from(total_nanos % 1_000_000_000).map_err(|_| invalid())?;
    Ok(Duration::new(secs, nanos))
}

/// `integer.fraction` units in nanoseconds, truncated to whole nanoseconds; `None` when
/// the integer part alone overflows.
fn number_nanos(integer: &str, fraction: &str, unit_nanos: u128) -> Option<u128> {
    let whole: u128 = if integer.is_empty() { 0 } else { integer.parse().ok()? };
    let mut nanos = whole.checked_mul(unit_nanos)?;
    // digits past the 20th cannot change a whole nanosecond of an hour
    let fraction = &fraction[..fraction.len().min(20)];
    if !fraction.is_empty() {
        let numerator: u128 = fraction.parse().ok()?;
        let denominator = 10u128.pow(u32::try_from(fraction.len()).ok()?);
        nanos = nanos.checked_add(numerator.checked_mul(unit_nanos)? / denominator)?;
    }
    Some(nanos)
}

/// Where to listen: `host:port`, or Go's `:port` for every interface and address family
/// (as `--bind-address :8081` means to controller-runtime and kube components).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BindAddress {
    AllInterfaces { port: u16 },
    Socket(SocketAddr),
}

impl BindAddress {
    /// The addresses to try in order: for every interface, IPv6 (which also accepts IPv4
    /// on a dual-stack host) and then IPv4, for hosts without IPv6.
    pub fn candidates(&self) -> Vec<SocketAddr> {
        match *self {
            Self::AllInterfaces { port } => {
                vec![(Ipv6Addr::UNSPECIFIED, port).into(), (Ipv4Addr::UNSPECIFIED, port).into()]
            }
            Self::Socket(addr) => vec![addr],
        }
    }
}

impl FromStr for BindAddress {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || format!("invalid address {text:?} (use :8081, 0.0.0.0:8081, 127.0.0.1:8081 or [::1]:8081)");
        match text.strip_prefix(':') {
            Some(port) => Ok(Self::AllInterfaces { port: port.parse().map_err(|_| invalid())? }),
            None => text.parse().map(Self::Socket).map_err(|_| invalid()),
        }
    }
}

impl fmt::Display for BindAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AllInterfaces { port } => write!(f, ":{port}"),
            Self::Socket(addr) => write!(f, "{addr}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_go_notation() {
        let ok = |text: &str| parse_duration(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("-0"), Duration::ZERO);
        assert_eq!(ok("0s"), Duration::ZERO);
        assert_eq!(ok("300ms"), Duration::from_millis(300));
        assert_eq!(ok("1.5h"), Duration::from_secs(5400));
        assert_eq!(ok("1h2m3s"), Duration::from_secs(3723));
        assert_eq!(ok("10us"), Duration::from_micros(10));
        assert_eq!(ok("10µs"), Duration::from_micros(10));
        assert_eq!(ok("10μs"), Duration::from_micros(10));
        assert_eq!(ok("500ns"), Duration::from_nanos(500));
        assert_eq!(ok("+5s"), Duration::from_secs(5));
        assert_eq!(ok("1m30s"), Duration::from_secs(90));
        assert_eq!(ok(".5s"), Duration::from_millis(500));
        assert_eq!(ok("1.s"), Duration::from_secs(1));
        assert_eq!(ok("2h45m0.5s"), Duration::from_millis(9_900_500));
        assert_eq!(ok("1.0000000001s"), Duration::new(1, 0));
        assert_eq!(ok("0.333333333333333333333333s"), Duration::new(0, 333_333_333));
        assert_eq!(ok("1s500ms"), Duration::from_millis(1500));
        assert_eq!(ok("2562047h47m16.854775807s"), Duration::new(9_223_372_036, 854_775_807));
    }

    #[test]
    fn durations_go_refuses_are_refused() {
        for text in [
            "",
            "5",
            "-",
            "+",
            ".",
            ".s",
            "s",
            "5x",
            "1.5.5s",
            "1s5",
            " 5s",
            "5s ",
            "1e3s",
            "1_000s",
            "2562047h47m16.854775808s",
        ] {
            assert!(parse_duration(text).is_err(), "{text:?} accepted");
        }
        assert_eq!(parse_duration("-5s"), Err(r#"duration "-5s" must not be negative"#.into()));
        assert_eq!(parse_duration("5"), Err(r#"missing unit in duration "5" (ns, us, ms, s, m, h)"#.into()));
    }

    #[test]
    fn bind_addresses() {
        assert_eq!(":8081".parse(), Ok(BindAddress::AllInterfaces { port: 8081 }));
        assert_eq!("0.0.0.0:8081".parse(), Ok(BindAddress::Socket("0.0.0.0:8081".parse().unwrap())));
        assert_eq!("[::1]:8081".parse(), Ok(BindAddress::Socket("[::1]:8081".parse().unwrap())));
        for text in ["8081", ":", ":http", ":65536", "localhost:8081", "0.0.0.0"] {
            assert!(text.parse::<BindAddress>().is_err(), "{text:?} accepted");
        }
        assert_eq!(BindAddress::AllInterfaces { port: 8081 }.to_string(), ":8081");
        assert_eq!(
            BindAddress::AllInterfaces { port: 8081 }.candidates(),
            ["[::]:8081".parse().unwrap(), "0.0.0.0:8081".parse().unwrap()]
        );
    }
}

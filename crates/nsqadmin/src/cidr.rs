//! `--allow-config-from-cidr`: parse a CIDR (`127.0.0.1/8`, `::1/128`) and
//! test whether a client IP is inside it (IPv4-mapped IPv6 counts as IPv4,
//! as in Go's `net.IPNet.Contains`).

use std::net::IpAddr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let bad = || format!("invalid CIDR address: {s}");
        let (ip, bits) = s.split_once('/').ok_or_else(bad)?;
        let addr: IpAddr = ip.parse().map_err(|_| bad())?;
        if bits.is_empty()
            || !bits.bytes().all(|b| b.is_ascii_digit())
            || (bits.len() > 1 && bits.starts_with('0'))
        {
            return Err(bad());
        }
        let prefix: u8 = bits.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(bad());
        }
        Ok(Cidr { addr, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u32::MAX << (32 - self.prefix)
                };
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u128::MAX << (128 - self.prefix)
                };
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contains() {
        let c = Cidr::parse("127.0.0.1/8").unwrap();
        assert!(c.contains("127.9.9.9".parse().unwrap()));
        assert!(c.contains("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!c.contains("10.0.0.1".parse().unwrap()));
        assert!(!c.contains("::1".parse().unwrap()));
        assert!(Cidr::parse("::1/128")
            .unwrap()
            .contains("::1".parse().unwrap()));
        assert!(Cidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("8.8.8.8".parse().unwrap()));
        for bad in ["127.0.0.1", "x/8", "127.0.0.1/33", "127.0.0.1/"] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }
}

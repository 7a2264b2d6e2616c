//! `loadbalancer/scale: "N"` (a Service or an Ingress): N VIPs per pool instead of one,
//! each in a VRRP instance owned by a different LB node, all serving at once (the
//! rancher/ingress-controller's wish: "make scale manageable as kubernetes ingress allows
//! multiple IPs in the ingress Address").

/// The most VIPs one object may ask for in one pool.
pub const MAX: u8 = 8;

/// The annotation's value: a number in 1..=[`MAX`].
pub fn parse(v: &str) -> Result<u8, String> {
    match v.trim().parse::<u8>() {
        Ok(n) if (1..=MAX).contains(&n) => Ok(n),
        _ => Err(format!(
            "loadbalancer/scale: {:?} is not a number from 1 to {MAX}; using 1",
            v.chars().take(32).collect::<String>()
        )),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn scale_is_a_small_positive_number() {
        assert_eq!(super::parse("2"), Ok(2));
        assert_eq!(super::parse(" 8 "), Ok(8));
        for bad in ["0", "9", "-1", "two", "", "2\n3", "256"] {
            assert!(super::parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}

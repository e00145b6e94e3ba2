//! Kubernetes name and label rules the generated objects must satisfy. SuperEdge produced
//! invalid names silently; here every violation is a reason a user can read.

/// A DNS-1123 label: what a Service name must be (a DNS-1035 label, stricter still).
pub fn check_dns1035_label(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 63 {
        return Err(format!("{name:?} must be 1-63 characters long"));
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Err(format!("{name:?} must start with a lowercase letter"));
    }
    check_label_chars(name)
}

/// A DNS-1123 subdomain: what a Deployment/StatefulSet name must be.
pub fn check_dns1123_subdomain(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 253 {
        return Err(format!("{name:?} must be 1-253 characters long"));
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(format!("{name:?} has an empty dot-separated part"));
        }
        check_label_chars(label).map_err(|_| {
            format!(
                "{name:?} must consist of lowercase alphanumerics, '-' or '.', and start and end with an alphanumeric"
            )
        })?;
    }
    Ok(())
}

fn check_label_chars(label: &str) -> Result<(), String> {
    let valid = label.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !label.starts_with('-')
        && !label.ends_with('-');
    if valid {
        Ok(())
    } else {
        Err(format!("{label:?} must consist of lowercase alphanumerics or '-', and start and end with an alphanumeric"))
    }
}

/// A label key (`[prefix/]name`), as `gridUniqKey` must be.
pub fn check_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        check_dns1123_subdomain(prefix).map_err(|e| format!("label key prefix: {e}"))?;
    }
    let valid_name = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if valid_name {
        Ok(())
    } else {
        Err(format!("{key:?} is not a valid label key (name part: 1-63 alphanumerics, '-', '_' or '.')"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_rules() {
        for ok in ["a", "echo-svc", "a1-b2", &"a".repeat(63)] {
            assert_eq!(check_dns1035_label(ok), Ok(()), "{ok}");
        }
        for bad in ["", "1abc", "-a", "a-", "A", "a_b", "a.b", &"a".repeat(64)] {
            assert!(check_dns1035_label(bad).is_err(), "{bad}");
        }
        for ok in ["echo-unit-a", "a.b-c", "0a", &format!("{}.{}", "a".repeat(63), "b".repeat(63))] {
            assert_eq!(check_dns1123_subdomain(ok), Ok(()), "{ok}");
        }
        for bad in ["", "a..b", "echo-Unit", "echo-unit_a", "a-", &"a".repeat(254)] {
            assert!(check_dns1123_subdomain(bad).is_err(), "{bad}");
        }
        for ok in ["zone1", "superedge.io/unit", "topology.kubernetes.io/zone", "a_b.c"] {
            assert_eq!(check_label_key(ok), Ok(()), "{ok}");
        }
        for bad in ["", "/x", "a/", "Bad_Prefix/x", "-x", "x y", &"a".repeat(64)] {
            assert!(check_label_key(bad).is_err(), "{bad}");
        }
    }
}

//! What the benchmarks share: picking what to run from the command line.

/// The `names` the command line (`args`, flags left out) asks for, in `names`' order; all of
/// them when it names none.
pub fn picked(args: &[String], names: &[&'static str]) -> Vec<&'static str> {
    let chosen: Vec<&'static str> = names
        .iter()
        .copied()
        .filter(|name| args.iter().any(|arg| arg == name))
        .collect();
    match chosen.is_empty() {
        true => names.to_vec(),
        false => chosen,
    }
}

#[cfg(test)]
mod tests {
    use super::picked;

    #[test]
    fn named_ones_in_order_or_all() {
        let args = [
            "--bench".to_owned(),
            "redis".to_owned(),
            "cascade".to_owned(),
        ];
        assert_eq!(
            picked(&args, &["cascade", "nats", "redis"]),
            ["cascade", "redis"]
        );
        assert_eq!(picked(&args[..1], &["a", "b"]), ["a", "b"]);
    }
}

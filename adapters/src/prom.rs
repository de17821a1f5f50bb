//! Reading Prometheus text exposition (an engine's `/metrics`): the sum of one metric's
//! series, filtered by labels. Enough for the counters recache reads off the engines while
//! serving; not a general parser (no escapes in label values, no timestamps needed).

/// Sum of the values of `name`'s series in Prometheus text whose labels include every pair
/// of `labels`; None when there is no such series.
pub fn series_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (series, value) = match rest.strip_prefix('{') {
            Some(r) => match r.split_once('}') {
                Some((l, v)) => (l, v),
                None => continue,
            },
            None if rest.starts_with(' ') => ("", rest),
            None => continue, // another metric whose name starts with `name`
        };
        let has = |(k, v): &(&str, &str)| series.contains(&format!("{k}=\"{v}\""));
        if !labels.iter().all(has) {
            continue;
        }
        if let Some(v) = (value.split_whitespace().next()).and_then(|v| v.parse::<f64>().ok()) {
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}

/// [`series_sum`] of a name with an optional selector, `name{k="v",..}`; 0 when absent.
pub fn selected_sum(text: &str, selector: &str) -> f64 {
    let (name, labels) = match selector.split_once('{') {
        Some((n, rest)) => (n, rest.trim_end_matches('}')),
        None => (selector, ""),
    };
    let pairs: Vec<(&str, &str)> = (labels.split(','))
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.trim(), v.trim().trim_matches('"')))
        .collect();
    series_sum(text, name, &pairs).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_the_named_series_only() {
        let text = "# HELP a_total x\na_total 1\na_total_x 5\na_total{x=\"1\"} 2\n";
        assert_eq!(series_sum(text, "a_total", &[]), Some(3.0));
        assert_eq!(series_sum(text, "a_total", &[("x", "1")]), Some(2.0));
        assert_eq!(series_sum(text, "b_total", &[]), None);
        assert_eq!(selected_sum(text, "a_total{x=\"1\"}"), 2.0);
        assert_eq!(selected_sum(text, "a_total"), 3.0);
        assert_eq!(selected_sum(text, "b_total{x=\"1\"}"), 0.0);
        assert_eq!(
            series_sum("a_total{x=\"1\" 2\n", "a_total", &[]),
            None,
            "torn line"
        );
    }
}

//! The same-head table: one line per layout and readout (every layout read by every head the
//! run asked for), then the baselines; each number with its 95% bootstrap interval over users,
//! each difference paired against UP read by the same readout, and, with `--repeat`, whether
//! the runs agreed. Point estimates and intervals are run 0's.

use super::report::Row;

/// A Markdown table of `rows` (as `bench quality` emits them).
pub fn same_head(rows: &[Row]) -> String {
    let mut groups: Vec<Vec<&Row>> = Vec::new();
    for r in rows {
        let same = |g: &&mut Vec<&Row>| g[0].layout == r.layout && g[0].readout == r.readout;
        match groups.iter_mut().find(same) {
            Some(g) => g.push(r),
            None => groups.push(vec![r]),
        }
    }
    let users = rows.first().map_or(0, |r| r.requests);
    let resamples = rows.first().map_or(0, |r| r.resamples);
    let mut out = format!(
        "{users} users; 95% bootstrap intervals over users ({resamples} resamples); Δ: paired, \
         against UP read by the same readout (baselines: the first readout's)\n\n\
         | layout | readout | Recall@10 | Recall@5 | NDCG@5 | NDCG@10 | MRR@10 \
         | Δ Recall@10 vs UP | Δ NDCG@10 vs UP | user-first | runs |\n\
         |---|---|---|---|---|---|---|---|---|---:|---|\n"
    );
    for g in &groups {
        let r = g[0];
        let (q, lo, hi) = (r.quality, r.ci95.lo, r.ci95.hi);
        let cell = |f: fn(&super::metrics::Quality) -> f64| {
            format!("{:.3} ({:.3}–{:.3})", f(&q), f(&lo), f(&hi))
        };
        let delta = |f: fn(&super::metrics::Quality) -> f64| match r.vs.get("up") {
            Some(v) => format!("{:+.3} ({:+.3} … {:+.3})", f(&v.delta), f(&v.lo), f(&v.hi)),
            None => String::new(),
        };
        let baseline = super::baselines::NAMES.contains(&r.layout.as_str());
        out += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.layout,
            if baseline { "" } else { &r.readout },
            cell(|q| q.recall_at_10),
            cell(|q| q.recall_at_5),
            cell(|q| q.ndcg_at_5),
            cell(|q| q.ndcg_at_10),
            cell(|q| q.mrr_at_10),
            delta(|q| q.recall_at_10),
            delta(|q| q.ndcg_at_10),
            if baseline {
                String::new()
            } else {
                format!("{}/{}", r.user_prefix, r.requests)
            },
            runs(g),
        );
    }
    out
}

/// How a group's runs agreed: `1`, `N, identical` (every user's rank the same in every run),
/// or the range of Recall@10 and NDCG@10 over the runs.
fn runs(group: &[&Row]) -> String {
    if group.len() < 2 {
        return "1".to_string();
    }
    if group.iter().all(|r| r.ranks == group[0].ranks) {
        return format!("{}, identical", group.len());
    }
    let range = |f: fn(&Row) -> f64| {
        let v = group.iter().map(|r| f(r));
        let lo = v.clone().fold(f64::INFINITY, f64::min);
        let hi = v.fold(f64::NEG_INFINITY, f64::max);
        format!("{lo:.3}–{hi:.3}")
    };
    format!(
        "{}: Recall@10 {}, NDCG@10 {}",
        group.len(),
        range(|r| r.quality.recall_at_10),
        range(|r| r.quality.ndcg_at_10)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quality::bootstrap::Resampling;

    const HOW: Resampling = Resampling {
        resamples: 100,
        seed: 1,
    };

    fn row(layout: &str, readout: &str, run: usize, ranks: Vec<Option<usize>>) -> Row {
        let mut r = Row::baseline(layout, ranks, HOW);
        r.readout = readout.into();
        r.run = run;
        r
    }

    #[test]
    fn one_line_per_layout_and_readout_with_runs_and_deltas() {
        let up = row("up", "label", 0, vec![Some(1), Some(20)]);
        let mut ip = row("ip", "label", 0, vec![Some(1), Some(2)]);
        ip.compare_to(&up, HOW);
        let mut ip_again = row("ip", "label", 1, vec![Some(1), Some(12)]);
        ip_again.compare_to(&up, HOW);
        let up_item = row("up", "item", 0, vec![Some(3), Some(4)]);
        let up_item_again = row("up", "item", 1, vec![Some(3), Some(4)]);
        let pop = row("popularity", "label", 0, vec![Some(50), Some(9)]);
        let t = same_head(&[up, ip, up_item, ip_again, up_item_again, pop]);
        let lines: Vec<&str> = t.lines().filter(|l| l.starts_with("| ")).collect();
        assert_eq!(lines.len(), 5, "{t}"); // header + up, ip, up·item, popularity
        assert!(lines[1].starts_with("| up | label | 0.500"), "{t}");
        assert!(lines[2].contains("| +0.500 ("), "{t}");
        assert!(
            lines[2].ends_with("| 2: Recall@10 0.500–1.000, NDCG@10 0.500–0.815 |"),
            "{t}"
        );
        assert!(lines[3].ends_with("| 2, identical |"), "{t}");
        assert!(lines[4].starts_with("| popularity |  | 0.500"), "{t}");
        assert!(t.starts_with("2 users;"), "{t}");
    }
}

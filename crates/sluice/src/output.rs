//! How client commands print: lines on stdout (the CLI's output, not logging), aligned tables,
//! and periods as people write them.

/// Prints rows as aligned columns.
pub(crate) fn table(rows: &[Vec<String>]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|v| v.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{v:<w$}", w = widths[i]))
            .collect();
        out(line.join("  ").trim_end());
    }
}

#[allow(clippy::print_stdout)]
pub(crate) fn out(line: &str) {
    println!("{line}");
}

/// A period as people write it: `minute`, or `10 minutes` for a unit multiplier of 10.
pub(crate) fn period(unit: &str, multiplier: u32) -> String {
    match multiplier {
        0 | 1 => unit.to_string(),
        n => format!("{n} {unit}s"),
    }
}

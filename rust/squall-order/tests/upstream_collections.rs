//! Expectations from dask's `test_order.py` on graphs that dask collections
//! (dask.array, xarray, stackstac) generate, rebuilt structurally.

mod common;

use common::{k1, key, with_letters, Dsk};

#[test]
fn store_finishes_one_column_before_the_other() {
    // da.store of concatenate(4 × ones((110, 4), chunks=(100, 2))).rechunk((100, 2)):
    // two independent columns of chunks, each rechunked from rows of
    // 100/10/100/10/... into rows of 100 and stored.
    let mut g = Dsk::new();
    let splits_of_column: [[i64; 6]; 2] = [[3, 6, 8, 12, 14, 18], [5, 9, 11, 15, 17, 20]];
    for (c, splits) in splits_of_column.iter().enumerate() {
        let c = c as i64;
        for i in 0..2 {
            g.root(key("ones_like", &[i, c]));
        }
        let concat = |r: i64| key("concatenate", &[r, c]);
        for r in 0..8 {
            g.data(concat(r), &[key("ones_like", &[r % 2, c])]);
        }
        // Each split cuts a piece off one input row.
        for (split, row) in splits.iter().zip([2, 2, 4, 4, 6, 6]) {
            g.task(k1("rechunk-split", *split), &[concat(row)]);
        }
        let split = |i: usize| k1("rechunk-split", splits[i]);
        let merges: [Vec<String>; 5] = [
            vec![concat(0)],
            vec![concat(1), split(0)],
            vec![concat(3), split(1), split(2)],
            vec![concat(5), split(3), split(4)],
            vec![concat(7), split(5)],
        ];
        for (r, deps) in merges.iter().enumerate() {
            let merge = key("rechunk-merge", &[r as i64, c]);
            g.task(merge.clone(), deps);
            g.task(key("store-map", &[r as i64, c]), &[merge]);
        }
    }
    let o = g.order();
    let store = |r: i64, c: i64| o[&key("store-map", &[r, c])];
    let first_column = (0..2)
        .min_by_key(|&c| (0..5).map(|r| store(r, c)).min())
        .unwrap();
    let last_of_first = (0..5).map(|r| store(r, first_column)).max().unwrap();
    let first_of_other = (0..5).map(|r| store(r, 1 - first_column)).min().unwrap();
    assert!(last_of_first < first_of_other);
}

/// dask.array blockwise over an n × n grid whose every block reads the same
/// `ndeps` plain objects, then `sum(axis=1)`.
fn blocks_sharing_objects(ndeps: i64, n: i64, separate_blocks: bool) -> Dsk {
    let mut g = Dsk::new();
    let objects: Vec<String> = (0..ndeps).map(|i| format!("object-{i}")).collect();
    for o in &objects {
        g.value(o.as_str());
    }
    for i in 0..n {
        for j in 0..n {
            let sum = key("sum", &[i, j]);
            if separate_blocks {
                g.task(key("random", &[i, j]), &objects);
                g.task(sum, &[key("random", &[i, j])]);
            } else {
                g.task(sum, &objects);
            }
        }
        let row: Vec<String> = (0..n).map(|j| key("sum", &[i, j])).collect();
        g.task(k1("sum-aggregate", i), &row);
    }
    g
}

#[test]
fn reducers_over_blocks_with_common_inputs_run_their_inputs_together() {
    for ndeps in [2, 5] {
        for n in [4, 7] {
            // (blocks kept as their own layer, expected spacing of a reducer's inputs)
            for (separate, spacing) in [(false, Some(1)), (true, Some(2)), (true, None)] {
                let g = blocks_sharing_objects(ndeps, n, separate);
                let o = g.order();
                assert!(g.max_pressure(&o) <= n + ndeps);
                let Some(spacing) = spacing else { continue };
                for i in 0..n {
                    let inputs = o.values_of(g.deps_of(&k1("sum-aggregate", i)));
                    let spread = inputs.iter().max().unwrap() - inputs.iter().min().unwrap();
                    assert_eq!(spread, (n as u32 - 1) * spacing);
                }
            }
        }
    }
}

/// xarray `anom = arr.groupby("day") - arr.groupby("day").mean(); anom.mean()`
/// on 200 single-row chunks and 5 days, as dask-expr lays it out.
fn anomaly_mean() -> Dsk {
    const DAYS: i64 = 5;
    const PER_DAY: i64 = 40;
    let mut g = Dsk::new();
    let sample = |i: i64| key("random_sample-e62428c5", &[i, 0]);
    for i in 0..DAYS * PER_DAY {
        g.root(sample(i));
    }
    g.value("shuffle-taker-38304");
    // Layer tokens differ per day, as dask's hashed names do.
    let day_tokens = ["4b5711", "e8d5cc", "e95b59", "35c3dc", "4ad167"];
    let partial_tokens = [
        ("d3c61d", "befb15"),
        ("356fd7", "5e9bed"),
        ("0acc65", "0e4d4d"),
        ("54917f", "3838b6"),
        ("5e062b", "386911"),
    ];
    for day in 0..DAYS {
        let tok = day_tokens[day as usize];
        let (p1, p2) = partial_tokens[day as usize];
        for j in 0..PER_DAY {
            let pick = key(&format!("getitem-mean_chunk-{tok}"), &[j, 0]);
            g.task(
                pick.clone(),
                &[sample(DAYS * j + day), "shuffle-taker-38304".to_owned()],
            );
            g.task(key(&format!("mean_chunk-{tok}"), &[j, 0]), &[pick]);
        }
        let level1 = reduce_by_four(
            &mut g,
            &format!("mean_chunk-{tok}"),
            PER_DAY,
            &format!("mean_combine-partial-{p1}"),
        );
        let level2 = reduce_by_four(
            &mut g,
            &format!("mean_combine-partial-{p1}"),
            level1,
            &format!("mean_combine-partial-{p2}"),
        );
        let parts: Vec<String> = (0..level2)
            .map(|m| key(&format!("mean_combine-partial-{p2}"), &[m, 0]))
            .collect();
        g.task(key("mean_agg-aggregate-stack-8d00d1", &[day, 0]), &parts);
        g.task(
            key("stack-8d00d1", &[day, 0]),
            &[key("mean_agg-aggregate-stack-8d00d1", &[day, 0])],
        );
    }
    for i in 0..DAYS * PER_DAY {
        let climatology = key("getitem-ddc8f1", &[i, 0]);
        g.task(
            climatology.clone(),
            &[
                key("stack-8d00d1", &[i % DAYS, 0]),
                "shuffle-taker-38304".to_owned(),
            ],
        );
        g.task(key("mean_chunk-257c3e", &[i, 0]), &[climatology, sample(i)]);
    }
    // 200 → 50 → 12, then the last two of the 50 join the final partials.
    reduce_by_four(
        &mut g,
        "mean_chunk-257c3e",
        DAYS * PER_DAY,
        "mean_combine-partial-c9b946",
    );
    reduce_by_four(
        &mut g,
        "mean_combine-partial-c9b946",
        48,
        "mean_combine-partial-9f4902",
    );
    let mut last = Vec::new();
    for m in 0..3 {
        let deps: Vec<String> = (4 * m..4 * m + 4)
            .map(|x| key("mean_combine-partial-9f4902", &[x, 0]))
            .collect();
        last.push(key("mean_combine-partial-bd56fe", &[m, 0]));
        g.task(last[m as usize].clone(), &deps);
    }
    last.push(key("mean_combine-partial-bd56fe", &[3, 0]));
    g.task(
        last[3].clone(),
        &[
            key("mean_combine-partial-c9b946", &[48, 0]),
            key("mean_combine-partial-c9b946", &[49, 0]),
        ],
    );
    g.task(k1("mean_agg-aggregate-f52453", 0), &last);
    g
}

/// Adds `ceil(n / 4)` nodes `(out, m, 0)` each reducing four consecutive
/// `(input, x, 0)`; returns how many were added.
fn reduce_by_four(g: &mut Dsk, input: &str, n: i64, out: &str) -> i64 {
    let count = (n + 3) / 4;
    for m in 0..count {
        let deps: Vec<String> = (4 * m..(4 * m + 4).min(n))
            .map(|x| key(input, &[x, 0]))
            .collect();
        g.task(key(out, &[m, 0]), &deps);
    }
    count
}

#[test]
fn anomaly_mean_releases_the_wide_stack_nodes_quickly() {
    let g = anomaly_mean();
    let o = g.order();
    let diag = g.diagnostics(&o);
    assert!(diag.pressure.iter().max().unwrap() <= &178);
    let mean_pressure = diag.pressure.iter().sum::<i64>() as f64 / diag.pressure.len() as f64;
    assert!(mean_pressure < 101.0);

    let stats = |filter: &dyn Fn(&str) -> bool| {
        let ages: Vec<i64> = g
            .names()
            .iter()
            .filter(|n| filter(n))
            .map(|n| diag.age[n])
            .collect();
        (
            ages.iter().copied().max().unwrap(),
            ages.iter().sum::<i64>() as f64 / ages.len() as f64,
        )
    };
    let (max_stack, mean_stack) = stats(&|n| n.starts_with("('stack-"));
    assert!(max_stack < 150 && mean_stack < 100.0);
    let (max_chunk, mean_chunk) = stats(&|n| n.contains("mean_chunk"));
    assert!(max_chunk > 900 && mean_chunk > 100.0);
}

const RECHUNK_MERGE_COHORTS: &str = "
    transpose 0 0 0 <- concat-groupby 0 0 0
    transpose 0 1 0 <- concat-groupby 0 1 0
    transpose 1 0 0 <- concat-groupby 1 0 0
    transpose 1 1 0 <- concat-groupby 1 1 0
    groupby-cohort 0 0 0 <- groupby-chunk 0 0 0
    groupby-cohort 0 0 1 <- groupby-chunk 0 0 1
    groupby-cohort 1 0 0 <- groupby-chunk 1 0 0
    groupby-cohort 1 0 1 <- groupby-chunk 1 0 1
    groupby-cohort-2 0 0 0 <- groupby-chunk-2 0 0 0
    groupby-cohort-2 0 0 1 <- groupby-chunk-2 0 0 1
    groupby-cohort-2 1 0 0 <- groupby-chunk-2 1 0 0
    groupby-cohort-2 1 0 1 <- groupby-chunk-2 1 0 1
    rechunk-merge 3 0 0 <- concat-shuffle 4 0 0, rechunk-split 12
    rechunk-merge 0 0 0 <- concat-shuffle 0 0 0, rechunk-split 1
    rechunk-merge 3 1 0 <- concat-shuffle 4 1 0, rechunk-split 14
    rechunk-merge 2 1 0 <- rechunk-split 10, rechunk-split 11
    rechunk-split 12 <- concat-shuffle 3 0 0
    rechunk-merge 0 1 0 <- concat-shuffle 0 1 0, rechunk-split 3
    rechunk-merge 1 0 0 <- rechunk-split 4, rechunk-split 5
    rechunk-merge 1 1 0 <- rechunk-split 6, rechunk-split 7
    rechunk-split 5 <- concat-shuffle 2 0 0
    rechunk-split 11 <- concat-shuffle 3 1 0
    rechunk-merge 2 0 0 <- rechunk-split 8, rechunk-split 9
    rechunk-split 1 <- concat-shuffle 1 0 0
    rechunk-split 14 <- concat-shuffle 3 1 0
    rechunk-split 4 <- concat-shuffle 1 0 0
    rechunk-split 7 <- concat-shuffle 2 1 0
    rechunk-split 10 <- concat-shuffle 2 1 0
    rechunk-split 6 <- concat-shuffle 1 1 0
    rechunk-split 3 <- concat-shuffle 1 1 0
    rechunk-split 9 <- concat-shuffle 3 0 0
    rechunk-split 8 <- concat-shuffle 2 0 0
    concat-shuffle 0 0 0 <- shuffle-split 0, shuffle-split 1
    concat-shuffle 0 1 0 <- shuffle-split 106, shuffle-split 107
    concat-shuffle 1 0 0 <- shuffle-split 4664, shuffle-split 4665
    concat-shuffle 1 1 0 <- shuffle-split 4770, shuffle-split 4771
    concat-shuffle 2 0 0 <- shuffle-split 9328, shuffle-split 9329, shuffle-split 9330
    concat-shuffle 2 1 0 <- shuffle-split 9487, shuffle-split 9488, shuffle-split 9489
    concat-shuffle 3 0 0 <- shuffle-split 16324, shuffle-split 16325
    concat-shuffle 3 1 0 <- shuffle-split 16430, shuffle-split 16431
    concat-shuffle 4 0 0 <- shuffle-split 20988, shuffle-split 20989
    concat-shuffle 4 1 0 <- shuffle-split 21094, shuffle-split 21095
    shuffle-split 9487 <- getitem-2 2 1 0
    shuffle-split 9489 <- getitem-2 14 1 0
    shuffle-split 106 <- getitem-open 106
    shuffle-split 4664 <- getitem-2 1 0 0
    shuffle-split 16431 <- getitem-2 15 1 0
    shuffle-split 16324 <- getitem-2 14 0 0
    shuffle-split 107 <- getitem-2 1 1 0
    shuffle-split 4665 <- getitem-2 2 0 0
    shuffle-split 4770 <- getitem-2 1 1 0
    shuffle-split 0 <- getitem-open 0
    shuffle-split 9328 <- getitem-2 2 0 0
    shuffle-split 9488 <- getitem-open 9488
    shuffle-split 16325 <- getitem-2 15 0 0
    shuffle-split 16430 <- getitem-2 14 1 0
    shuffle-split 20988 <- getitem-2 15 0 0
    shuffle-split 9329 <- getitem-open 9329
    shuffle-split 4771 <- getitem-2 2 1 0
    shuffle-split 1 <- getitem-2 1 0 0
    shuffle-split 20989 <- getitem-open 20989
    shuffle-split 9330 <- getitem-2 14 0 0
    shuffle-split 21094 <- getitem-2 15 1 0
    shuffle-split 21095 <- getitem-open 21095
    getitem-2 1 0 0 <- open_dataset 1 0 0
    getitem-2 14 0 0 <- open_dataset 14 0 0
    getitem-2 2 1 0 <- open_dataset 2 1 0
    getitem-2 15 0 0 <- open_dataset 15 0 0
    getitem-2 15 1 0 <- open_dataset 15 1 0
    getitem-2 2 0 0 <- open_dataset 2 0 0
    getitem-2 1 1 0 <- open_dataset 1 1 0
    getitem-2 14 1 0 <- open_dataset 14 1 0
    groupby-chunk-2 0 0 1 <- rechunk-merge 2 0 0
    groupby-chunk-2 0 0 0 <- rechunk-merge 0 0 0
    concat-groupby 0 0 0 <- groupby-cohort-2 0 0 0, groupby-cohort-2 0 0 1
    groupby-chunk 0 0 1 <- rechunk-merge 3 0 0
    groupby-chunk 0 0 0 <- rechunk-merge 1 0 0
    concat-groupby 1 0 0 <- groupby-cohort 0 0 0, groupby-cohort 0 0 1
    groupby-chunk 1 0 1 <- rechunk-merge 3 1 0
    groupby-chunk 1 0 0 <- rechunk-merge 1 1 0
    concat-groupby 1 1 0 <- groupby-cohort 1 0 0, groupby-cohort 1 0 1
    open_dataset 14 1 0
    groupby-chunk-2 1 0 0 <- rechunk-merge 0 1 0
    groupby-chunk-2 1 0 1 <- rechunk-merge 2 1 0
    concat-groupby 0 1 0 <- groupby-cohort-2 1 0 0, groupby-cohort-2 1 0 1
    getitem-open 9329
    open_dataset 2 1 0
    =open_dataset 15 1 0
    getitem-open 20989
    getitem-open 0
    open_dataset 1 0 0
    getitem-open 9488
    getitem-open 21095
    open_dataset 2 0 0
    getitem-open 106
    open_dataset 1 1 0
    =open_dataset 14 0 0
    =open_dataset 15 0 0
";

#[test]
fn rechunked_map_reduce_cohorts_finish_branch_by_branch() {
    for with_extra_longest_path_inputs in [false, true] {
        let mut g = Dsk::from_spec(RECHUNK_MERGE_COHORTS);
        if with_extra_longest_path_inputs {
            // Extra independent inputs flip the longest-path strategy switch.
            let extra: Vec<String> = (20..35).map(|i| key("open-dataset", &[i, 0, 0])).collect();
            for e in &extra {
                g.root(e.clone());
            }
            g.task(k1("dummy", 0), &extra);
        }
        let o = g.order();
        let pressure = g.diagnostics(&o).pressure;
        // Only the original graph is bounded; the extra inputs come last.
        assert!(pressure.iter().take(99).all(|&p| p <= 7));
        let mut finals: Vec<u32> = [[0, 0], [0, 1], [1, 0], [1, 1]]
            .iter()
            .map(|[i, j]| o[&key("transpose", &[*i, *j, 0])])
            .collect();
        finals.sort_unstable();
        let diffs: Vec<u32> = finals.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(diffs, [10, 39, 10]);
    }
}

const DOUBLE_DIFF: &str = "
    a 3 0 1
    a 3 1 1
    a 3 1 0
    a 2 2 2
    a 4 0 1
    a 4 1 0
    a 4 0 0
    a 5 0 0
    =c 0 0 0 <- b 1 0 0
    =c 0 0 1 <- b 1 0 1
    =c 0 0 2 <- b 1 0 2
    =c 0 1 0 <- b 1 1 0
    =c 0 1 1 <- b 1 1 1
    =c 0 1 2 <- b 1 1 2
    =c 0 2 0 <- b 1 2 0
    =c 0 2 1 <- b 1 2 1
    =c 1 0 0 <- a 5 0 0
    =c 1 0 1 <- b 0 0 1
    =c 1 0 2 <- b 0 0 2
    =c 1 1 0 <- b 0 1 0
    =c 1 1 1 <- b 0 1 1
    =c 1 1 2 <- b 0 1 2
    =c 1 2 0 <- b 0 2 0
    b 1 0 0 <- a 4 0 0
    b 1 0 1 <- a 4 0 0
    b 1 0 2 <- a 4 0 1
    b 1 1 0 <- a 4 0 0
    b 1 1 1 <- a 4 0 0
    b 1 1 2 <- a 4 0 1
    b 1 2 0 <- a 4 1 0
    b 1 2 1 <- a 4 1 0
    =c 1 2 1 <- b 0 2 1
    =c 1 2 2 <- b 0 2 2
    d 0 0 0 <- c 0 0 0, c 1 0 0
    d 0 0 1 <- c 0 0 1, c 1 0 1
    d 0 0 2 <- c 0 0 2, c 1 0 2
    d 0 1 0 <- c 0 1 0, c 1 1 0
    d 0 1 1 <- c 0 1 1, c 1 1 1
    d 0 1 2 <- c 0 1 2, c 1 1 2
    d 0 2 0 <- c 0 2 0, c 1 2 0
    d 0 2 1 <- c 0 2 1, c 1 2 1
    d 0 2 2 <- a 2 2 2, c 1 2 2
    b 0 0 1 <- a 3 0 1
    b 0 0 2 <- a 3 0 1
    b 0 1 0 <- a 3 1 0
    b 0 1 1 <- a 3 1 1
    b 0 1 2 <- a 3 1 1
    b 0 2 0 <- a 3 1 0
    b 0 2 1 <- a 3 1 1
    b 0 2 2 <- a 3 1 1
    e 0 0 0 <- d 0 0 0
    e 0 0 1 <- d 0 0 1
    e 0 0 2 <- d 0 0 2
    e 0 1 0 <- d 0 1 0
    e 0 1 1 <- d 0 1 1
    e 0 1 2 <- d 0 1 2
    e 0 2 0 <- d 0 2 0
    e 0 2 1 <- d 0 2 1
    e 0 2 2 <- d 0 2 2
    =END <- e 0 0 0, e 0 0 1, e 0 0 2, e 0 1 0, e 0 1 1, e 0 1 2, e 0 2 0, e 0 2 1, e 0 2 2
";

#[test]
fn double_difference_keeps_pressure_bounded() {
    with_letters(|letters| {
        let g = Dsk::from_spec_renamed(DOUBLE_DIFF, |name| {
            match name {
                "a" => letters[0],
                "b" => letters[1],
                "c" => letters[2],
                "d" => letters[3],
                "e" => letters[4],
                other => other,
            }
            .to_owned()
        });
        let o = g.order();
        assert!(g.max_pressure(&o) <= 11);
    });
}

const STACKSTAC: &str = "
    transpose 0 0 0 <- vindex-merge 0 0 0
    transpose 0 1 0 <- vindex-merge 0 1 0
    vindex-merge 0 0 0 <- vindex-slice 0 0 0, vindex-slice 1 0 0, vindex-slice 2 0 0, vindex-slice 3 0 0
    vindex-slice 2 0 0 <- getitem-vindex 2 0 0
    vindex-merge 0 1 0 <- vindex-slice 0 0 1, vindex-slice 1 0 1, vindex-slice 2 0 1, vindex-slice 3 0 1
    vindex-slice 2 0 1 <- getitem-vindex 2 0 1
    vindex-slice 1 0 0 <- getitem-vindex 1 0 0
    getitem-vindex 2 0 1 <- shuffle-split 321, shuffle-split 322
    vindex-slice 3 0 1 <- getitem-vindex 3 0 1
    vindex-slice 0 0 1 <- getitem-vindex 0 0 1
    getitem-vindex 3 0 1 <- shuffle-split 299, shuffle-split 300
    getitem-vindex 2 0 0 <- concatenate 0 1 9 1
    vindex-slice 3 0 0 <- getitem-vindex 3 0 0
    shuffle-split 322 <- concatenate 0 1 9 1
    vindex-slice 0 0 0 <- getitem-vindex 0 0 0
    getitem-vindex 0 0 1 <- shuffle-split 341, shuffle-split 342
    vindex-slice 1 0 1 <- getitem-vindex 1 0 1
    shuffle-split 321 <- concatenate-getitem 321
    shuffle-split 299 <- concatenate-getitem 299
    getitem-vindex 3 0 0 <- concatenate 0 1 8 1
    getitem-vindex 0 0 0 <- concatenate 0 1 10 0
    getitem-vindex 1 0 0 <- concatenate 0 1 9 0
    concatenate-getitem 299 <- fetch-raster 0 0 8 1
    concatenate 0 1 9 1 <- getitem-sub 0 1 9 1
    concatenate-getitem 321 <- fetch-raster 0 0 9 1
    fetch-raster 0 0 8 1 <- asset_table 0 0
    concatenate 0 1 8 1 <- getitem-sub 0 1 8 1
    fetch-raster 0 0 9 1 <- asset_table 0 0
    concatenate 0 1 9 0 <- getitem-sub 0 1 9 0
    shuffle-split 300 <- concatenate 0 1 8 1
    concatenate 0 1 10 0 <- getitem-sub 0 1 10 0
    asset_table 0 0 <- asset-table-data 0 0
    shuffle-split 342 <- concatenate 0 1 10 0
    getitem-vindex 1 0 1 <- shuffle-split 319, shuffle-split 320
    getitem-sub 0 1 10 0 <- fetch-raster 0 0 10 0
    getitem-sub 0 1 8 1 <- fetch-raster 0 0 8 1
    shuffle-split 341 <- concatenate-getitem 341
    getitem-sub 0 1 9 1 <- fetch-raster 0 0 9 1
    concatenate-getitem 341 <- fetch-raster 0 0 10 0
    asset-table-data 0 0
    getitem-sub 0 1 9 0 <- fetch-raster 0 0 9 0
    fetch-raster 0 0 10 0 <- asset_table 0 0
    shuffle-split 320 <- concatenate 0 1 9 0
    shuffle-split 319 <- concatenate-getitem 319
    fetch-raster 0 0 9 0 <- asset_table 0 0
    concatenate-getitem 319 <- fetch-raster 0 0 9 0
";

#[test]
fn stackstac_vindex_keeps_pressure_bounded() {
    let g = Dsk::from_spec(STACKSTAC);
    let o = g.order();
    assert!(g.max_pressure(&o) <= 9);
}

/// Three mean reductions over two sets of random samples (one over both, one
/// over each), each chunk of four plus a fused last chunk. `tokens` name the
/// samples and, per reduction, its aggregate / combine / chunk layers.
fn three_reductions(samples: [&str; 2], tokens: [[&str; 3]; 3]) -> Dsk {
    let mut g = Dsk::new();
    let sample = |s: &str, i: i64| key(&format!("random_sample-{s}"), &[i, 0, 0, 0]);
    for s in samples {
        for i in 0..5 {
            g.root(sample(s, i));
        }
    }
    let inputs: [&[&str]; 3] = [&samples, &samples[..1], &samples[1..]];
    for ([agg, combine, chunk], uses) in tokens.into_iter().zip(inputs) {
        let chunk_key = |i: i64| key(&format!("mean_chunk-{chunk}"), &[i, 0, 0, 0]);
        for i in 0..4 {
            let deps: Vec<String> = uses.iter().map(|s| sample(s, i)).collect();
            g.task(chunk_key(i), &deps);
        }
        let combine_key = |i: i64| key(&format!("mean_combine-partial-{combine}"), &[i, 0, 0, 0]);
        let chunks: Vec<String> = (0..4).map(chunk_key).collect();
        g.task(combine_key(0), &chunks);
        let fused = key(
            &format!("mean_chunk-mean_combine-partial-{combine}"),
            &[1, 0, 0, 0],
        );
        let last: Vec<String> = uses.iter().map(|s| sample(s, 4)).collect();
        g.task(fused.clone(), &last);
        g.data(combine_key(1), &[fused]);
        g.task(
            key(&format!("mean_agg-aggregate-{agg}"), &[0, 0, 0]),
            &[combine_key(0), combine_key(1)],
        );
    }
    g
}

#[test]
fn layer_names_do_not_change_reduction_pressure() {
    let pressures: Vec<i64> = [
        (
            ["e16b", "02ea"],
            [
                ["10d7", "17c7", "98a3"],
                ["fdb3", "23ad", "7edb"],
                ["cc19", "0c98", "540e"],
            ],
        ),
        (
            ["a155", "241f"],
            [
                ["e79d", "e7d9", "0df6"],
                ["c764", "5741", "d6bd"],
                ["0507", "a7c4", "fd17"],
            ],
        ),
        (
            ["0000", "ffff"],
            [
                ["ffff", "0000", "ffff"],
                ["0000", "ffff", "0000"],
                ["8888", "8888", "8888"],
            ],
        ),
    ]
    .into_iter()
    .map(|(samples, tokens)| {
        let g = three_reductions(samples, tokens);
        g.max_pressure(&g.order())
    })
    .collect();
    assert!(pressures.windows(2).all(|w| w[0] == w[1]), "{pressures:?}");
}

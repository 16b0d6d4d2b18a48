//! Reports built from hand-made results folders, including bad ones.

use super::*;

fn temp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("edgemu-report-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn svg_only() -> Formats {
    // SVG only keeps the tests light; PNG rendering is covered in plots::tests.
    Formats {
        png: false,
        svg: true,
    }
}

#[test]
fn a_folder_that_is_not_a_run_is_a_clear_error() {
    let d = temp("notrun");
    write(&d.join("notes.txt"), "hello");
    let e = build(std::slice::from_ref(&d), &d.join("out"), svg_only()).unwrap_err();
    assert!(
        format!("{e:#}").contains("is not a results folder"),
        "{e:#}"
    );
    let e = build(&[d.join("missing")], &d.join("out"), svg_only()).unwrap_err();
    assert!(format!("{e:#}").contains("not a folder"), "{e:#}");
}

#[test]
fn pfec_run_from_hand_made_csv() {
    let d = temp("pfec");
    let mut csv = String::from("context,realization,rho,scheme,utility,source_packets,f1,top1\n");
    for scheme in ["priorityfec", "udp", "priority-only"] {
        for rho in [0.4, 0.8, 1.2] {
            for ctx in 0..3 {
                let u = if scheme == "udp" { 0.6 } else { 0.9 } + 0.01 * ctx as f64 + 0.05 * rho;
                csv.push_str(&format!(
                    "{ctx},1,{rho},{scheme},{u},10,{},{}\n",
                    u - 0.1,
                    u - 0.05
                ));
            }
        }
    }
    write(&d.join("handoffs.csv"), &csv);
    let out = d.join("report");
    let (md, _, skipped) = build(std::slice::from_ref(&d), &out, svg_only()).unwrap();
    assert!(skipped.is_empty(), "{skipped:?}");
    for f in [
        "pfec-utility.svg",
        "pfec-f1.svg",
        "pfec-top1.svg",
        "pfec-ablation.svg",
        "pfec-cells.csv",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let svg = std::fs::read_to_string(out.join("pfec-utility.svg")).unwrap();
    assert!(svg.contains("priorityfec") && svg.contains("udp"));
    let md = std::fs::read_to_string(md).unwrap();
    assert!(
        md.contains("![recovered utility vs rho](pfec-utility.svg)"),
        "{md}"
    );
    // 3 handoffs: 1 realization (the utility interval's unit), 3 contexts (F1, top-1).
    assert!(md.contains("| priority-only | 0.8 | 3 | 1 | 3 |"), "{md}");
}

fn lyreo_run(d: &Path, truncate: bool) {
    let mut req = String::from("users,servers,mix,nu,policy,seed,id,user,slot,server,input_len,output_len,upload_s,wait_s,prefill_s,decode_s,e2e_s,rejected\n");
    let mut slots = String::from("users,servers,mix,nu,policy,seed,slot,server,class,assigned,eta,y,z,peak_bytes,peak_frac,high_kv,occupancy_bytes,reserved_bytes,backlog,iterations,busy_s\n");
    for policy in ["least-loaded", "random"] {
        for slot in 0..10 {
            for server in 0..2 {
                let e2e = 1.0 + slot as f64 * 0.1 + server as f64;
                req.push_str(&format!("20,2,mixed,1,{policy},1,{slot}{server},1,{slot},{server},70,215,0.1,0.1,0.1,0.5,{e2e},0\n"));
                let frac = 0.5 + 0.05 * slot as f64;
                slots.push_str(&format!("20,2,mixed,1,{policy},1,{slot},{server},a10,1,{},0,0,100,{frac},0,10,10,0,5,0.5\n", 0.2 * server as f64));
            }
        }
    }
    if truncate {
        req.push_str("20,2,mixed,1,random,1,99,1,3");
    }
    write(&d.join("requests.csv"), &req);
    write(&d.join("server_slots.csv"), &slots);
}

#[test]
fn lyreo_run_with_truncated_csv_and_no_summary_is_a_partial_report() {
    let d = temp("lyreo");
    lyreo_run(&d, true);
    let out = d.join("report");
    let (md, _, skipped) = build(std::slice::from_ref(&d), &out, svg_only()).unwrap();
    assert!(
        skipped.iter().any(|s| s.contains("truncated")),
        "{skipped:?}"
    );
    assert!(
        skipped
            .iter()
            .any(|s| s.contains("Table II") && s.contains("missing")),
        "{skipped:?}"
    );
    for f in [
        "lyreo-latency-cdf.svg",
        "lyreo-latency-box.svg",
        "lyreo-lb-deviation.svg",
        "lyreo-kv-random.svg",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let svg = std::fs::read_to_string(out.join("lyreo-kv-random.svg")).unwrap();
    assert!(svg.contains("90 %") && svg.contains("server 1"));
    let md = std::fs::read_to_string(md).unwrap();
    assert!(md.contains("## Skipped"), "{md}");
}

#[test]
fn lyreo_table_ii_from_summary() {
    let d = temp("lyreo2");
    lyreo_run(&d, false);
    write(
        &d.join("summary.json"),
        r#"{"grid":[{"users":20,"servers":2,"mix":"mixed","nu":1.0,"policy":"random","seeds":1,"lat_mean_s":1.25,"lat_p99_s":2.5,"lb_dev":0.01,"high_kv":0.1}]}"#,
    );
    let out = d.join("report");
    let (_, _, skipped) = build(std::slice::from_ref(&d), &out, svg_only()).unwrap();
    assert!(skipped.is_empty(), "{skipped:?}");
    let csv = std::fs::read_to_string(out.join("table-ii.csv")).unwrap();
    assert!(
        csv.contains("20,2,mixed,1,random,1,1.2500,2.5000,0.0100,0.1000"),
        "{csv}"
    );
}

#[test]
fn link_run_in_progress_and_two_runs_side_by_side() {
    let d = temp("links");
    let run = d.join("run-a");
    let mut csv = String::from("t_s,link,dir,up,rate_bps,offered,delivered,lost,queue_dropped,down_dropped,retransmissions,bytes_offered,bytes_delivered,interval_delivered_bps,queued_bytes,delay_p50_ms,delay_p99_ms\n");
    for i in 0..10u64 {
        csv.push_str(&format!(
            "{}.000,wan,a->b,1,10000000,{},{},{},0,0,0,{},{},{},0,10.5,12.0\n",
            i,
            i * 100,
            i * 95,
            i * 5,
            i * 140_000,
            i * 133_000,
            1_064_000
        ));
    }
    write(&run.join("h1/links.csv"), &csv);
    write(
        &run.join("h1/events.jsonl"),
        "{\"t_ns\":2000000000,\"host\":\"h1\",\"source\":\"chaos#0\",\"kind\":\"link.kill\",\"detail\":{\"target\":\"link wan a->b\"}}\n\
         {\"t_ns\":2500000000,\"host\":\"h1\",\"source\":\"chaos#1\",\"kind\":\"link.squeeze\",\"detail\":{\"target\":\"link cell a->b\"}}\n\
         {\"t_ns\":4000000000,\"host\":\"h1\",\"source\":\"chaos#0\",\"kind\":\"link.restore\",\"detail\":{\"link\":\"wan\",\"dir\":\"a->b\"}}\n\
         {\"t_ns\":6000000000,\"host\":\"h1\",\"source\":\"control\",\"kind\":\"link.set\",\"detail\":{\"link\":\"wan\",\"dir\":\"a->b\"}}\n\
         {\"t_ns\":70000",
    );
    let other = d.join("run-b");
    lyreo_run(&other, false);
    let out = d.join("report");
    let (md, _, skipped) = build(&[run.clone(), other.clone()], &out, svg_only()).unwrap();
    assert!(
        skipped.iter().any(|s| s.contains("no summary.json")),
        "{skipped:?}"
    );
    assert!(
        skipped.iter().any(|s| s.contains("not JSON")),
        "{skipped:?}"
    );
    let svg = std::fs::read_to_string(out.join("run-a-link-wan-a-_b-rate.svg")).unwrap();
    assert!(svg.contains("down") && svg.contains("link.set") && svg.contains("configured"));
    assert!(
        !svg.contains("link.squeeze"),
        "an event of another link is drawn"
    );
    assert!(out.join("run-b-lyreo-latency-cdf.svg").is_file());
    let links = std::fs::read_to_string(out.join("run-a-links.csv")).unwrap();
    assert!(links.contains("wan,a->b,10.00,1.12,"), "{links}");
    let md = std::fs::read_to_string(md).unwrap();
    assert!(md.contains("run-a") && md.contains("run-b"));
}

#[test]
fn host_folders_are_found_by_any_host_file_and_a_report_folder_is_not_one() {
    let run = temp("host-dirs");
    write(&run.join("h1/links.csv"), "t_ns\n");
    write(&run.join("h1/events.jsonl"), "");
    // A host that ran only LYREO actors (and lost its event log).
    write(&run.join("h2/requests.csv"), "slot\n");
    write(&run.join("report/links.csv"), "link\n");
    write(&run.join("report/report.md"), "# report\n");
    std::fs::create_dir_all(run.join("empty")).unwrap();
    let names = |v: Vec<PathBuf>| -> Vec<String> {
        v.iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(names(links::host_dirs(&run)), ["h1", "h2"]);
    assert_eq!(names(links::link_host_dirs(&run)), ["h1"]);
    assert_eq!(
        names(crate::results::summary::host_dirs(&run)),
        ["h1", "h2"]
    );
}

/// The shipped full PriorityFEC grid (`docs/runs/pfec-full`, quoted in
/// docs/experiments/priorityfec.md): the report's cells, computed from `handoffs.csv` by this
/// view, agree with the experiment's own `summary.csv` — means and intervals over the same
/// units — so the documented figures can be redrawn from the shipped rows.
#[test]
fn the_shipped_pfec_grid_reports_its_summary() {
    let run = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/runs/pfec-full");
    let out = temp("pfec-shipped");
    let (_, _, skipped) = build(std::slice::from_ref(&run), &out, svg_only()).unwrap();
    assert!(skipped.is_empty(), "{skipped:?}");
    let cells = super::csv::Table::read(&out.join("pfec-cells.csv")).unwrap();
    let summary = super::csv::Table::read(&run.join("summary.csv")).unwrap();
    assert_eq!(summary.rows.len(), 40, "10 schemes × 4 ρ");
    assert_eq!(cells.rows.len(), summary.rows.len());
    let key = |t: &super::csv::Table, r: &[String]| {
        let rho = super::csv::Table::f64(r, t.col("rho").unwrap());
        (r[t.col("scheme").unwrap()].clone(), pfec::rho_key(rho))
    };
    for s in &summary.rows {
        let c = cells
            .rows
            .iter()
            .find(|c| key(&cells, c) == key(&summary, s))
            .unwrap_or_else(|| panic!("no report cell for {:?}", key(&summary, s)));
        for (sc, cc) in [
            ("n", "n"),
            ("realizations", "realizations"),
            ("contexts", "contexts"),
            ("utility", "utility"),
            ("utility_ci", "utility_ci95"),
            ("f1", "f1"),
            ("f1_ci", "f1_ci95"),
            ("top1", "top1"),
            ("top1_ci", "top1_ci95"),
        ] {
            let a = super::csv::Table::f64(s, summary.col(sc).unwrap());
            let b = super::csv::Table::f64(c, cells.col(cc).unwrap());
            // The report prints 4 decimals.
            assert!(
                (a - b).abs() <= 5.1e-5,
                "{:?} {sc}: summary {a}, report {b}",
                key(&summary, s)
            );
        }
    }
}

//! Reads the real ShareGPT JSON when it has been fetched. When it is missing the
//! test prints a skip line and passes — unless env `CI` is set, where it fails
//! (CI runs `scripts/fetch-data.sh` first).

use edgemu_data::sharegpt::{read, ReadOptions, Role};

#[test]
fn real_file_loads_with_its_truncated_tail() {
    let path = match edgemu_data::locate() {
        Ok(p) => p,
        Err(e) => {
            if std::env::var_os("CI").is_some() {
                panic!("CI is set and the data is missing: {e}");
            }
            eprintln!("SKIP (real data): {e}");
            return;
        }
    };
    let loaded = read(
        &path,
        ReadOptions {
            allow_truncated_tail: true,
        },
    )
    .expect("read the real file");
    // The published file has 17 671 complete conversations before its cut.
    assert!(loaded.conversations.len() > 10_000);
    assert!(loaded.truncated.is_some());
    let turns = loaded.conversations.iter().flat_map(|c| &c.turns);
    let users = turns.clone().filter(|t| t.from == Role::User).count();
    let assistants = turns.filter(|t| t.from == Role::Assistant).count();
    assert!(
        users > 10_000 && assistants > 10_000,
        "{users} {assistants}"
    );
    // Strict reading refuses the cut and names the file.
    let e = read(
        &path,
        ReadOptions {
            allow_truncated_tail: false,
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("ShareGPT_V3_unfiltered_cleaned_split.json"),
        "{e}"
    );
}

//! `fi_info` sees the provider: RDM and DGRAM endpoints, tagged RDM on request, nothing
//! for hints it cannot meet, and its environment variables.

mod common;

fn fi_info(args: &[&str]) -> String {
    let out = common::fi_command("fi_info")
        .args(args)
        .output()
        .expect("running fi_info");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The endpoint types of entries whose provider is exactly `myri` (libfabric also
/// layers its own `ofi_rxd` over any DGRAM provider: `myri;ofi_rxd`).
fn myri_types(text: &str) -> Vec<String> {
    let mut types = Vec::new();
    let mut ours = false;
    for line in text.lines().map(str::trim) {
        if let Some(p) = line.strip_prefix("provider:") {
            ours = p.trim() == "myri";
        } else if let Some(t) = line.strip_prefix("type:")
            && ours
        {
            types.push(t.trim().to_owned());
        }
    }
    types
}

#[test]
fn lists_rdm_and_dgram() {
    if !common::require_libfabric() {
        return;
    }
    let types = myri_types(&fi_info(&["-p", "myri"]));
    assert_eq!(types, ["FI_EP_RDM", "FI_EP_DGRAM"]);
}

#[test]
fn answers_tagged_rdm() {
    if !common::require_libfabric() {
        return;
    }
    let text = fi_info(&["-p", "myri", "-t", "FI_EP_RDM", "-c", "FI_TAGGED"]);
    assert_eq!(myri_types(&text), ["FI_EP_RDM"], "{text}");
    let verbose = fi_info(&["-p", "myri", "-t", "FI_EP_RDM", "-c", "FI_TAGGED", "-v"]);
    assert!(verbose.contains("FI_TAGGED"), "{verbose}");
    assert!(verbose.contains("FI_SOCKADDR_IN"), "{verbose}");
}

#[test]
fn impossible_hints_get_nothing() {
    if !common::require_libfabric() {
        return;
    }
    for args in [
        &["-p", "myri", "-t", "FI_EP_MSG"][..],
        &["-p", "myri", "-c", "FI_RMA"],
        &["-p", "myri", "-c", "FI_ATOMIC"],
        &["-p", "myri", "-a", "FI_SOCKADDR_IB"],
    ] {
        let text = fi_info(args);
        assert!(myri_types(&text).is_empty(), "{args:?} answered:\n{text}");
    }
}

#[test]
fn lists_its_environment_variables() {
    if !common::require_libfabric() {
        return;
    }
    let text = fi_info(&["-e"]);
    for var in [
        "FI_MYRI_TRANSPORT",
        "FI_MYRI_ADDR",
        "FI_MYRI_PORT",
        "FI_MYRI_RANK_PORTS",
        "FI_MYRI_CC",
        "FI_MYRI_PACING",
        "FI_MYRI_SHM",
        "FI_MYRI_STATS",
    ] {
        assert!(text.contains(var), "fi_info -e lacks {var}");
    }
}

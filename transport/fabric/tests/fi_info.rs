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

/// The endpoint types of entries whose provider is exactly `myri` (with
/// `FI_MYRI_LAYERING=1` libfabric also layers its own `ofi_rxd` over the DGRAM endpoint:
/// `myri;ofi_rxd`).
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

/// The providers `fi_info` names.
fn providers(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("provider:"))
        .map(|p| p.trim().to_owned())
        .collect()
}

#[test]
fn no_utility_provider_layers_over_it_unless_asked() {
    if !common::require_libfabric() {
        return;
    }
    // Open MPI matches `mtl_ofi_provider_include myri` by prefix and takes the first
    // match: `myri;ofi_rxd` listed first would win over the provider's own RDM.
    let text = fi_info(&["-p", "myri", "-t", "FI_EP_RDM"]);
    assert_eq!(providers(&text), ["myri"], "{text}");
    let out = common::fi_command("fi_info")
        .args(["-p", "myri", "-t", "FI_EP_RDM"])
        .env("FI_MYRI_LAYERING", "1")
        .output()
        .expect("running fi_info");
    let text = String::from_utf8_lossy(&out.stdout);
    let names = providers(&text);
    assert!(names.iter().any(|p| p == "myri;ofi_rxd"), "{text}");
    assert!(names.iter().any(|p| p == "myri"), "{text}");
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
        "FI_MYRI_CMA",
        "FI_MYRI_STATS",
        "FI_MYRI_MTU",
        "FI_MYRI_PEER_SOCKET",
        "FI_MYRI_VIA",
        "FI_MYRI_LAYERING",
    ] {
        assert!(text.contains(var), "fi_info -e lacks {var}");
    }
}

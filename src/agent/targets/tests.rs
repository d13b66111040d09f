use super::super::config;
use super::*;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

fn template() -> Template {
    Template {
        probe: ProbeKind::Tcp { size: 64 },
        interval: DEFAULT_INTERVAL,
        timeout: DEFAULT_TIMEOUT,
        labels: vec![],
    }
}

fn no_lookup() -> Box<Lookup> {
    Box::new(|h, _| Err(io::Error::other(format!("no lookups in this test ({h})"))))
}

#[test]
fn labels_follow_the_rules() {
    let tcp = ProbeKind::Tcp { size: 64 };
    assert_eq!(target_label("10.0.0.2", 11111, &tcp), "10.0.0.2");
    assert_eq!(target_label("10.0.0.2", 2000, &tcp), "10.0.0.2:2000");
    assert_eq!(target_label("fe80::1", 2000, &tcp), "[fe80::1]:2000");
    assert_eq!(target_label("db1", 5432, &ProbeKind::Connect), "db1:5432");
    assert_eq!(target_label("h", 11111, &ProbeKind::Icmp { size: 64 }), "h");
}

#[test]
fn peers_file_syntax() {
    let p = parse_peers("# fleet\n10.0.0.2\n\n  10.0.0.3:2000  # second\n[::1]:5\n").unwrap();
    assert_eq!(p, vec!["10.0.0.2", "10.0.0.3:2000", "[::1]:5"]);
    assert_eq!(parse_peers("a\nb:c:d\n").unwrap_err().0, 2);
    assert_eq!(parse_peers("h:0").unwrap_err().0, 1);
}

#[test]
fn plan_precedence() {
    let cfg = config::parse(
        r#"
interval = "2s"
probe = "udp"
peers = ["10.0.0.9"]
[labels]
zone = "a"
[[target]]
address = "10.0.0.5:22"
probe = "connect"
labels = { role = "ssh" }
[[target]]
address = "10.0.0.6"
[[target]]
probe = "db"
url = "postgres://app@10.0.0.7/app"
"#,
        Path::new("a.toml"),
    )
    .unwrap();
    let cli = CliTargets {
        peers: vec!["10.0.0.2".into()],
        size: Some(100),
        timeout: Some(Duration::from_millis(300)),
        labels: vec![("zone".into(), "b".into()), ("dc".into(), "x".into())],
        ..CliTargets::default()
    };
    let env = |k: &str| (k == "PGPASSWORD").then(|| "pw-from-env".to_string());
    let plan = Plan::build(&cli, Some(&cfg), &env);
    let mut c = Collector::new(no_lookup(), Duration::from_secs(60), SelfFilter::default());
    let got = c.collect(&plan, Instant::now());
    assert!(got.errors.is_empty(), "{:?}", got.errors);
    let t = &got.targets;
    assert_eq!(t.len(), 5);
    // CLI peer: CLI size and timeout, config interval and probe, CLI labels over config labels.
    assert_eq!(t[0].target, "10.0.0.2");
    assert_eq!(t[0].probe, ProbeKind::Udp { size: 100 });
    assert_eq!(t[0].interval, Duration::from_secs(2));
    assert_eq!(t[0].timeout, Duration::from_millis(300));
    let labels = vec![
        ("dc".to_string(), "x".to_string()),
        ("zone".into(), "b".into()),
    ];
    assert_eq!(t[0].labels, labels);
    assert_eq!(t[1].target, "10.0.0.9");
    assert_eq!(t[2].target, "10.0.0.5:22");
    assert_eq!(t[2].probe, ProbeKind::Connect);
    assert_eq!(t[2].labels.len(), 3);
    assert_eq!(t[3].probe, ProbeKind::Udp { size: 100 });
    assert_eq!(t[4].target, "10.0.0.7:5432");
    assert_eq!(t[4].addr, "10.0.0.7:5432".parse().unwrap());
    match &t[4].probe {
        ProbeKind::Db { url } => {
            assert_eq!(url.password.as_ref().unwrap().expose(), "pw-from-env")
        }
        p => panic!("{p:?}"),
    }
    assert!(!format!("{:?}", t[4].target).contains("pw-from-env"));
}

#[test]
fn dns_peers_labelled_by_ip_and_last_good_list_kept() {
    let answers: Arc<Mutex<io::Result<Vec<SocketAddr>>>> = Arc::new(Mutex::new(Ok(vec![
        "10.1.0.2:11111".parse().unwrap(),
        "10.1.0.3:11111".parse().unwrap(),
    ])));
    let a = answers.clone();
    let lookup: Box<Lookup> = Box::new(move |_, _| match &*a.lock().unwrap() {
        Ok(v) => Ok(v.clone()),
        Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
    });
    let plan = Plan {
        sources: vec![Source::Dns {
            text: "svc.local".into(),
            template: template(),
        }],
    };
    let mut c = Collector::new(lookup, Duration::from_secs(60), SelfFilter::default());
    let t0 = Instant::now();
    let got = c.collect(&plan, t0);
    let names: Vec<_> = got.targets.iter().map(|t| t.target.as_str()).collect();
    assert_eq!(names, ["10.1.0.2", "10.1.0.3"]);
    // Not looked up again within the interval.
    *answers.lock().unwrap() = Err(io::Error::other("SERVFAIL"));
    let got = c.collect(&plan, t0 + Duration::from_secs(30));
    assert_eq!(got.targets.len(), 2);
    assert!(got.dns_errors.is_empty());
    // Looked up after the interval: failure keeps the list and reports each label.
    let got = c.collect(&plan, t0 + Duration::from_secs(61));
    assert_eq!(got.targets.len(), 2);
    assert_eq!(got.dns_errors, ["10.1.0.2", "10.1.0.3"]);
    assert!(got.errors[0].contains("SERVFAIL"), "{:?}", got.errors);
    // A new answer replaces it.
    *answers.lock().unwrap() = Ok(vec!["10.1.0.4:11111".parse().unwrap()]);
    let got = c.collect(&plan, t0 + Duration::from_secs(122));
    assert_eq!(got.targets[0].target, "10.1.0.4");
    assert_eq!(got.targets.len(), 1);
}

#[test]
fn unresolvable_name_left_out_until_it_resolves() {
    let plan = Plan {
        sources: vec![Source::Host {
            text: "db.example:5432".into(),
            template: template(),
        }],
    };
    let mut c = Collector::new(no_lookup(), Duration::from_secs(60), SelfFilter::default());
    let got = c.collect(&plan, Instant::now());
    assert!(got.targets.is_empty());
    assert_eq!(got.dns_errors, ["db.example:5432"]);
    assert_eq!(got.errors.len(), 1);
}

#[test]
fn peers_file_reread_on_change_and_kept_on_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("peers");
    std::fs::write(&path, "10.0.0.2\n10.0.0.3\n").unwrap();
    let plan = Plan {
        sources: vec![Source::File {
            path: path.clone(),
            template: template(),
        }],
    };
    let mut c = Collector::new(no_lookup(), Duration::from_secs(60), SelfFilter::default());
    let now = Instant::now();
    assert_eq!(c.collect(&plan, now).targets.len(), 2);
    std::fs::write(&path, "10.0.0.2\n10.0.0.3\n10.0.0.4:9\n").unwrap();
    let got = c.collect(&plan, now);
    assert_eq!(got.targets.len(), 3);
    assert_eq!(got.targets[2].target, "10.0.0.4:9");
    std::fs::write(&path, "10.0.0.2\nnot a:host:x\n").unwrap();
    let got = c.collect(&plan, now);
    assert_eq!(got.targets.len(), 3);
    assert!(got.errors[0].contains(":2:"), "{:?}", got.errors);
    std::fs::remove_file(&path).unwrap();
    let got = c.collect(&plan, now);
    assert_eq!(got.targets.len(), 3);
    assert!(got.errors[0].contains("cannot read"), "{:?}", got.errors);
    // Reported once, not at every check.
    assert!(c.collect(&plan, now).errors.is_empty());
    std::fs::write(&path, "10.0.0.8\n").unwrap();
    assert_eq!(c.collect(&plan, now).targets[0].target, "10.0.0.8");
}

#[test]
fn unchanged_inputs_are_not_collected_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("peers");
    std::fs::write(&path, "10.0.0.2\n").unwrap();
    let answers: Arc<Mutex<Vec<SocketAddr>>> =
        Arc::new(Mutex::new(vec!["10.1.0.2:11111".parse().unwrap()]));
    let a = answers.clone();
    let lookup: Box<Lookup> = Box::new(move |_, _| Ok(a.lock().unwrap().clone()));
    let plan = Plan {
        sources: vec![
            Source::File {
                path: path.clone(),
                template: template(),
            },
            Source::Dns {
                text: "svc.local".into(),
                template: template(),
            },
        ],
    };
    let mut c = Collector::new(lookup, Duration::from_secs(60), SelfFilter::default());
    let t0 = Instant::now();
    assert_eq!(c.collect_if_changed(&plan, t0).unwrap().targets.len(), 2);
    assert!(
        c.collect_if_changed(&plan, t0 + Duration::from_secs(1))
            .is_none()
    );
    // The file changes: collected again.
    std::fs::write(&path, "10.0.0.2\n10.0.0.3\n").unwrap();
    let got = c
        .collect_if_changed(&plan, t0 + Duration::from_secs(2))
        .unwrap();
    assert_eq!(got.targets.len(), 3);
    assert!(
        c.collect_if_changed(&plan, t0 + Duration::from_secs(3))
            .is_none()
    );
    // The name is due again: collected again, with the new answer.
    *answers.lock().unwrap() = vec!["10.1.0.9:11111".parse().unwrap()];
    let got = c
        .collect_if_changed(&plan, t0 + Duration::from_secs(61))
        .unwrap();
    assert!(got.targets.iter().any(|t| t.target == "10.1.0.9"));
    // Another plan or self filter: collected again.
    let one = Plan {
        sources: plan.sources[..1].to_vec(),
    };
    assert_eq!(
        c.collect_if_changed(&one, t0 + Duration::from_secs(62))
            .unwrap()
            .targets
            .len(),
        2
    );
    c.self_filter.local = vec!["10.0.0.3".parse().unwrap()];
    assert!(
        c.collect_if_changed(&one, t0 + Duration::from_secs(63))
            .is_some()
    );
}

#[test]
fn never_itself() {
    let f = SelfFilter {
        local: vec!["10.0.0.1".parse().unwrap(), "127.0.0.1".parse().unwrap()],
        bind: None,
        port: Some(11111),
    };
    let spec = |addr: &str, probe: ProbeKind| TargetSpec {
        target: addr.into(),
        addr: addr.parse().unwrap(),
        probe,
        interval: DEFAULT_INTERVAL,
        timeout: DEFAULT_TIMEOUT,
        labels: vec![],
    };
    let tcp = ProbeKind::Tcp { size: 64 };
    assert!(f.is_self(&spec("10.0.0.1:11111", tcp.clone())));
    assert!(f.is_self(&spec("127.0.0.5:11111", tcp.clone())));
    assert!(f.is_self(&spec("[::ffff:10.0.0.1]:11111", tcp.clone())));
    assert!(!f.is_self(&spec("10.0.0.1:2000", tcp.clone())));
    assert!(!f.is_self(&spec("10.0.0.2:11111", tcp.clone())));
    assert!(f.is_self(&spec("10.0.0.1:0", ProbeKind::Icmp { size: 64 })));
    let bound = SelfFilter {
        bind: Some("127.0.0.1".parse().unwrap()),
        ..f.clone()
    };
    assert!(bound.is_self(&spec("127.0.0.1:11111", tcp.clone())));
    assert!(!bound.is_self(&spec("10.0.0.1:11111", tcp.clone())));
    let none = SelfFilter {
        port: None,
        ..f.clone()
    };
    assert!(!none.is_self(&spec("10.0.0.1:11111", tcp.clone())));

    let plan = Plan {
        sources: vec![
            Source::Host {
                text: "10.0.0.1".into(),
                template: template(),
            },
            Source::Host {
                text: "10.0.0.2".into(),
                template: template(),
            },
            Source::Host {
                text: "10.0.0.2".into(),
                template: template(),
            },
        ],
    };
    let mut c = Collector::new(no_lookup(), Duration::from_secs(60), f);
    let got = c.collect(&plan, Instant::now());
    assert_eq!(got.targets.len(), 1);
    assert_eq!(got.left_out_self, 1);
}

#[test]
fn host_facts() {
    assert!(local_addresses().iter().any(|a| a.is_loopback()));
    assert_eq!(
        local_address_toward("127.0.0.1:9".parse().unwrap()),
        Some("127.0.0.1".parse().unwrap())
    );
    assert!(!default_source(None).is_empty());
    let (add, remove) = diff(&[], &[]);
    assert_eq!((add, remove), (0, 0));
}

//! Unit tests of the configuration file parser: every error names its file, line and key, and no password
//! ever appears in one.

use super::*;

fn p(text: &str) -> Result<Config, ConfigError> {
    parse(text, Path::new("/etc/rt/agent.toml"))
}

#[test]
fn a_multi_line_value_gives_a_one_line_error() {
    let e = p("size = \"\"\"\"\n[[target]]\naddress = \"x\"\"\"\"\n").unwrap_err();
    let line = e.to_string();
    assert!(!line.contains('\n'), "{line}");
    assert!(line.contains("key `size`: invalid size"), "{line}");
}

#[test]
fn full_example_parses() {
    let c = p(r#"
source = "app1"
interval = "1s"
timeout = "500ms"
probe = "tcp"
size = 64
peers = ["10.0.0.2", "10.0.0.3:11111"]
peers_file = "peers"
peers_dns = "roundtrip.default.svc.cluster.local"
[labels]
zone = "a"
[[target]]
address = "db1:5432"
probe = "connect"
interval = "5s"
labels = { role = "db" }
[[target]]
probe = "db"
url = "postgres://app:hunter2@db1:5432/app"
"#)
    .unwrap();
    assert_eq!(c.source.as_deref(), Some("app1"));
    assert_eq!(c.timeout, Some(Duration::from_millis(500)));
    assert_eq!(c.probe, Some(ProbeName::Tcp));
    assert_eq!(c.size, Some(64));
    assert_eq!(c.peers, vec!["10.0.0.2", "10.0.0.3:11111"]);
    assert_eq!(c.peers_file, Some(PathBuf::from("/etc/rt/peers")));
    assert_eq!(c.labels, vec![("zone".into(), "a".into())]);
    assert_eq!(c.targets.len(), 2);
    assert_eq!(c.targets[0].line, 12);
    assert_eq!(c.targets[0].address.as_deref(), Some("db1:5432"));
    assert_eq!(c.targets[0].probe, Some(ProbeName::Connect));
    assert_eq!(c.targets[0].interval, Some(Duration::from_secs(5)));
    assert_eq!(c.targets[0].labels, vec![("role".into(), "db".into())]);
    assert_eq!(c.targets[1].probe, Some(ProbeName::Db));
    assert_eq!(c.targets[1].url.as_ref().unwrap().host, "db1");
}

#[test]
fn watch_tables() {
    let c = p(
        "[[watch]]\ninterface = \"lo\"\nfilter = \"tcp port 5432\"\nprotocols = [\"pgsql\"]\n\
         labels = { app = \"shop\" }\nclient_label = true\n[[watch]]\ninterface = \"any\"\nprotocols = \"auto\"\n",
    )
    .unwrap();
    assert_eq!(c.watch.len(), 2);
    assert_eq!(c.watch[0].interface, "lo");
    assert_eq!(c.watch[0].filter.as_ref().unwrap().text(), "tcp port 5432");
    assert!(c.watch[0].client_label);
    assert_eq!(c.watch[0].labels, vec![("app".into(), "shop".into())]);
    assert_eq!(c.watch[1].protocols, super::super::watch::Protocols::Auto);
    let e = p("[[watch]]\ninterface = \"lo\"\nprotocols = [\"smtp\"]\n").unwrap_err();
    assert_eq!(e.line, 3, "{e}");
    assert!(e.to_string().contains("unknown protocol 'smtp'"), "{e}");
    let e = p("[[watch]]\nfilter = \"tcp port\"\n").unwrap_err();
    assert!(e.to_string().contains("watch.filter"), "{e}");
    let e = p("[[watch]]\nprotocols = \"auto\"\n").unwrap_err();
    assert!(e.to_string().contains("has no interface"), "{e}");
}

#[test]
fn empty_file_is_an_empty_config() {
    let c = p("# nothing\n").unwrap();
    assert!(c.targets.is_empty() && c.peers.is_empty());
}

#[test]
fn unknown_key_names_file_line_key() {
    let e = p("interval = \"1s\"\nintervall = \"2s\"\n").unwrap_err();
    assert_eq!(e.line, 2);
    assert_eq!(e.key, "intervall");
    let s = e.to_string();
    assert!(
        s.starts_with("config /etc/rt/agent.toml:2: key `intervall`: unknown key"),
        "{s}"
    );
    let e = p("[[target]]\naddress = \"a\"\nport = 1\n").unwrap_err();
    assert_eq!((e.line, e.key.as_str()), (3, "target.port"));
}

#[test]
fn bad_values_name_their_line() {
    let cases: &[(&str, usize, &str)] = &[
        ("interval = \"fast\"", 1, "interval"),
        ("interval = 5", 1, "interval"),
        ("interval = \"0s\"", 1, "interval"),
        ("\n\nprobe = \"smoke\"", 3, "probe"),
        ("probe = \"db\"", 1, "probe"),
        ("size = 3", 1, "size"),
        ("size = 1000000", 1, "size"),
        ("size = -1", 1, "size"),
        ("peers = \"10.0.0.1\"", 1, "peers"),
        ("peers = [\"a:b:c\"]", 1, "peers"),
        ("peers = [\"host:0\"]", 1, "peers"),
        ("peers = [1]", 1, "peers"),
        ("[labels]\nzone = 1", 2, "labels.zone"),
        ("[labels]\n\"bad-name\" = \"x\"", 2, "labels.bad-name"),
        ("[labels]\ntarget = \"x\"", 2, "labels.target"),
        ("[labels]\n__x = \"x\"", 2, "labels.__x"),
        ("source = \"\"", 1, "source"),
        ("[[target]]\nprobe = \"tcp\"", 1, "target.address"),
        ("[[target]]\nprobe = \"db\"", 2, "target.url"),
        (
            "[[target]]\naddress = \"h\"\nurl = \"postgres://h/db\"",
            3,
            "target.probe",
        ),
        (
            "[[target]]\nprobe = \"db\"\naddress = \"h\"\nurl = \"postgres://h/db\"",
            3,
            "target.address",
        ),
        (
            "[[target]]\nprobe = \"db\"\nurl = \"nope://h\"",
            3,
            "target.url",
        ),
        ("target = 1", 1, "target"),
    ];
    for (text, line, key) in cases {
        let e = p(text).expect_err(text);
        assert_eq!((e.line, e.key.as_str()), (*line, *key), "{text}: {e}");
        assert!(!e.to_string().contains('\n'), "{e}");
    }
}

#[test]
fn syntax_errors_name_line_and_key() {
    let e = p("interval = \"1s\"\ntimeout = \n").unwrap_err();
    assert_eq!(e.line, 2, "{e}");
    assert_eq!(e.key, "timeout");
    assert!(!e.to_string().contains('\n'));
    let e = p("a = 1\na = 2\n").unwrap_err();
    assert_eq!(e.line, 2, "{e}");
}

#[test]
fn passwords_never_in_errors() {
    let e =
        p("[[target]]\nprobe = \"db\"\nurl = \"postgres://u:s3cretpw@h/db?bogus=1\"").unwrap_err();
    assert!(!e.to_string().contains("s3cretpw"), "{e}");
    let e = p("\"postgres://u:s3cretpw@h/db\"\n").unwrap_err();
    assert!(!e.to_string().contains("s3cretpw"), "{e}");
}

#[test]
fn passwords_with_odd_characters_never_in_errors() {
    for (url, pw) in [
        ("postgres://u:pa/ss@h/db?bogus=1", "pa/ss"),
        ("postgres://u:p?ss@h/db", "p?ss"),
        ("postgres://u:p@ss@h/db?x=1", "p@ss"),
        ("nope://u:secretpw@h", "secretpw"),
        ("postgres://u:%zzsecret@h/db", "%zzsecret"),
    ] {
        let text = format!("[[target]]\nprobe = \"db\"\nurl = \"{url}\"\n");
        let e = p(&text).unwrap_err().to_string();
        assert!(!e.contains(pw), "{pw} in {e}");
    }
    // A line TOML cannot read that holds a URL.
    let e =
        p("[[target]]\nurl \u{0}Oysql://root:fuzzpw@[::1]:3306/x?sslmode=bogus\"\n").unwrap_err();
    assert!(!e.to_string().contains("fuzzpw"), "{e}");
    assert_eq!(e.key, "url");
    assert_eq!(
        scrub("a postgres://u:p/w@h/x b"),
        "a postgres://u:***@h/x b"
    );
    assert_eq!(scrub("no urls"), "no urls");
    let e = p("peers_dns = \"x.postgres://app:fuzzpw@db1:5432/app\"").unwrap_err();
    assert!(!e.to_string().contains("fuzzpw"), "{e}");
    let e = p("\"postgres://app:fuzzpw@db1\" = 1").unwrap_err();
    assert!(!e.to_string().contains("fuzzpw"), "{e}");
    assert_eq!(scrub("http://host/x"), "http://host/x");
}

#[test]
fn sizes_as_strings_with_units() {
    assert_eq!(p("size = \"1k\"").unwrap().size, Some(1024));
    assert_eq!(p("size = 0x40").unwrap().size, Some(64));
}

#[test]
fn label_names() {
    assert!(check_label_name("zone").is_ok());
    assert!(check_label_name("_z9").is_ok());
    for bad in ["", "9a", "a-b", "__a", "le", "source", "zoné"] {
        assert!(check_label_name(bad).is_err(), "{bad}");
    }
}

#[test]
fn unreadable_file() {
    let e = load(Path::new("/nonexistent/agent.toml")).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("config /nonexistent/agent.toml: cannot read it")
    );
}

#[test]
fn span_is_a_positive_duration() {
    assert_eq!(
        p("span = \"90s\"\n").unwrap().span,
        Some(Duration::from_secs(90))
    );
    assert_eq!(p("interval = \"1s\"\n").unwrap().span, None);
    for bad in ["span = \"0s\"\n", "span = 60\n", "span = \"60\"\n"] {
        let e = p(bad).unwrap_err().to_string();
        assert!(e.contains("key `span`"), "{bad}: {e}");
    }
}

#[test]
fn buckets_is_1_2_4_or_8() {
    use crate::agent::buckets::Buckets;
    assert_eq!(
        p("buckets = 8\n").unwrap().buckets,
        Some(Buckets::new(8).unwrap())
    );
    assert_eq!(p("buckets = 1\n").unwrap().buckets, Some(Buckets::ONE));
    assert_eq!(p("interval = \"1s\"\n").unwrap().buckets, None);
    for bad in [
        "buckets = 3\n",
        "buckets = 0\n",
        "buckets = \"4\"\n",
        "buckets = -1\n",
    ] {
        let e = p(bad).unwrap_err().to_string();
        assert!(
            e.contains("key `buckets`") && e.contains("1, 2, 4 or 8"),
            "{bad}: {e}"
        );
        assert!(!e.contains('\n'), "{e}");
    }
}

# Helpers the bench scripts share; source it: . "$(dirname "$0")/lib.sh"

# A free TCP port on 127.0.0.1.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# samba_conf DIR PORT: a guest share DIR/share served on 127.0.0.1:PORT, with smbd's state under DIR
# (config in DIR/smb.conf). Start it with: setsid smbd --foreground --no-process-group --debug-stdout -s DIR/smb.conf
samba_conf() {
    local dir=$1 port=$2
    mkdir -p "$dir"/{share,private,lock,state,cache,pid,log}
    cat >"$dir/smb.conf" <<CONF
[global]
  smb ports = $port
  interfaces = 127.0.0.1
  bind interfaces only = yes
  private dir = $dir/private
  lock directory = $dir/lock
  state directory = $dir/state
  cache directory = $dir/cache
  pid directory = $dir/pid
  ncalogin dir = $dir/lock
  log file = $dir/log/log.%m
  map to guest = Bad User
  disable netbios = yes
  server role = standalone server
  load printers = no
  printing = bsd
  printcap name = /dev/null
  disable spoolss = yes
[share]
  path = $dir/share
  guest ok = yes
  read only = no
  force user = root
CONF
}

# haproxy_splice_conf FILE BIND UPSTREAM: HAProxy `mode tcp` relaying BIND (ADDR:PORT) to UPSTREAM with splice(2)
# both ways (the zero-copy relay the proxy benches compare with). Start it with: haproxy -f FILE -db
haproxy_splice_conf() {
    cat > "$1" <<EOF
global
    nbthread $(nproc)
defaults
    mode tcp
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    option splice-request
    option splice-response
frontend f
    bind $2
    default_backend b
backend b
    server s $3
EOF
}

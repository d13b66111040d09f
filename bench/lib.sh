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

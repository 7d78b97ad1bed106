# Helpers the bench scripts share (source it).

# A free loopback port.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# origin_nginx_conf WORK PORT: a one-worker nginx answering `ok` on 127.0.0.1:PORT,
# its files under WORK, written to WORK/nginx.conf.
origin_nginx_conf() {
  local work=$1 port=$2
  cat > "$work/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $work/nginx.pid;
error_log $work/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path $work; proxy_temp_path $work; fastcgi_temp_path $work; uwsgi_temp_path $work; scgi_temp_path $work;
  server { listen 127.0.0.1:$port; location / { return 200 "ok\n"; } }
}
CONF
}

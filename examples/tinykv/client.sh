#!/bin/bash
# A splitbrain stdio client for tinykv: one JSON op per line in, one JSON completion out.
while IFS= read -r op; do
  IFS=$'\t' read -r req addr < <(jq -r '[(if .f == "read" then "GET \(.key)"
      elif .f == "write" then "PUT \(.key) \(.value|tojson)"
      else "CAS \(.key) \(.value[0]|tojson) \(.value[1]|tojson)" end), .address] | @tsv' <<<"$op")
  if ! { exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}"; } 2>/dev/null; then
    echo '{"type": "fail", "error": "connection refused"}'; continue   # nothing was sent
  fi
  echo "$req" >&3
  if ! read -r -t 3 answer <&3; then answer="ERR no answer"; fi
  exec 3>&-
  case "$answer" in
    "OK "*) if [[ $req == GET* ]]; then echo "{\"type\": \"ok\", \"value\": ${answer#OK }}"
            else echo '{"type": "ok"}'; fi ;;   # a write or cas: its own value
    NIL) echo '{"type": "ok", "value": null}' ;;
    FAIL*) echo '{"type": "fail", "error": "cas mismatch"}' ;;
    *) jq -cn --arg e "$answer" '{type: "info", error: $e}' ;;
  esac
done

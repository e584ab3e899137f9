#!/usr/bin/perl
# A splitbrain stdio client for tinykv in Perl (core modules only), keeping one
# connection per node open across operations.
use strict;
use warnings;
use IO::Socket::INET;
use JSON::PP;

my $json = JSON::PP->new->canonical->allow_nonref;
my %conn;
$| = 1;
while (my $line = <STDIN>) {
    my $op = $json->decode($line);
    my ($f, $k, $v) = @$op{qw(f key value)};
    my $req = $f eq 'read' ? "GET $k"
            : $f eq 'write' ? "PUT $k " . $json->encode($v)
            : "CAS $k " . $json->encode($v->[0]) . ' ' . $json->encode($v->[1]);
    my $s = $conn{$op->{address}} ||= IO::Socket::INET->new(PeerAddr => $op->{address}, Timeout => 2);
    if (!$s) { print qq({"type": "fail", "error": "cannot connect"}\n); next }
    my $answer;
    eval {
        local $SIG{ALRM} = sub { die "timeout\n" };
        alarm 3;
        print $s "$req\n";
        $answer = <$s>;
        alarm 0;
    };
    if (!defined $answer) {          # timeout or closed: unknown, and the socket is spent
        delete $conn{$op->{address}};
        print $json->encode({type => 'info', error => $@ || 'connection closed'}), "\n";
        next;
    }
    chomp $answer;
    if ($answer =~ /^OK (.*)$/) { print $f eq 'read' ? qq({"type": "ok", "value": $1}\n) : qq({"type": "ok"}\n) }
    elsif ($answer eq 'NIL') { print qq({"type": "ok", "value": null}\n) }
    elsif ($answer =~ /^FAIL/) { print qq({"type": "fail", "error": "cas mismatch"}\n) }
    else { print $json->encode({type => 'info', error => $answer}), "\n" }
}

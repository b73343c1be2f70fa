import heapq, random, itertools
class Net:
    def __init__(s,m,sd): s.m=m; s.sd=sd
    def delay(s): return abs(random.normalvariate(s.m,s.sd))
class Backoff:
    def __init__(s,base,cap): s.base=base; s.cap=cap
    def expo(s,n): return min(s.cap, pow(2,n)*s.base)
class NoBackoff(Backoff):
    def backoff(s,n): return 0
class ExpoBackoff(Backoff):
    def backoff(s,n): return s.expo(n)
class Equal(Backoff):
    def backoff(s,n):
        v=s.expo(n); return v/2+random.uniform(0,v/2)
class Full(Backoff):
    def backoff(s,n): return random.uniform(0,s.expo(n))
class Decorr(Backoff):
    def __init__(s,b,c): Backoff.__init__(s,b,c); s.sleep=s.base
    def backoff(s,n):
        s.sleep=min(s.cap, random.uniform(s.base, s.sleep*3)); return s.sleep
cnt=itertools.count()
class Stats: calls=0
def msg(tm,to,rep,payload): return (tm,next(cnt),to,rep,payload)
class Server:
    def __init__(s,net,st): s.v=0; s.net=net; s.st=st
    def write(s,tm,r):
        s.st.calls+=1; ok=False
        if r[4]==s.v: s.v+=1; ok=True
        return msg(tm+s.net.delay(), r[3], None, ok)
    def read(s,tm,r): return msg(tm+s.net.delay(), r[3], None, s.v)
class Client:
    def __init__(s,srv,net,b): s.srv=srv; s.net=net; s.a=0; s.b=b
    def start(s,tm): return msg(tm+s.net.delay(), s.srv.read, s.read_rsp, None)
    def read_rsp(s,tm,r): return msg(tm+s.net.delay(), s.srv.write, s.write_rsp, r[4])
    def write_rsp(s,tm,r):
        if not r[4]:
            s.a+=1
            return msg(tm+s.net.delay()+s.b.backoff(s.a), s.srv.read, s.read_rsp, None)
def run(q):
    tm=0
    while q:
        m=heapq.heappop(q); tm=m[0]
        n=m[2](tm,m)
        if n is not None: heapq.heappush(q,n)
    return tm
import sys
for clients in (10,50,100):
  for name,cls in (("no backoff",NoBackoff),("exponential",ExpoBackoff),("full",Full),("equal",Equal),("decorr",Decorr)):
    st=Stats(); tm=0
    for t in range(100):
        net=Net(10,2); srv=Server(net,st); q=[]
        for i in range(clients):
            c=Client(srv,net,cls(5,2000)); heapq.heappush(q,c.start(0))
        tm+=run(q)
    print(clients,name,st.calls/100,round(tm/100),flush=True)
